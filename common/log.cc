#include "common/log.h"

#include <spdlog/sinks/stdout_sinks.h>

namespace longhaul {

std::shared_ptr<spdlog::logger> MakeSiteLogger(const std::string& site, const std::string& level) {
  // A sink per logger (the pattern lives in the sink); each line is one fwrite to stderr,
  // so lines of different sites do not interleave mid-line.
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("longhaul." + site, sink);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %L [" + site + "] %v");
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  return logger;
}

}  // namespace longhaul
