// Logging setup: spdlog to stderr with the site name in every line, so that logs of several
// daemons on one machine (tests, the demo) stay readable when interleaved.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace longhaul {

// Configures the default logger. `level` is one of trace, debug, info, warn, error.
void InitLogging(const std::string& site, const std::string& level = "info");

}  // namespace longhaul
