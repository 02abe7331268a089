#include "common/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace longhaul {

void InitLogging(const std::string& site, const std::string& level) {
  auto logger = spdlog::stderr_color_mt("longhaul");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [" + site + "] %v");
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace longhaul
