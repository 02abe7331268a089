// Logging setup: spdlog to stderr with the site name in every line, so that logs of several
// daemons in one process or on one machine (tests, the demo) stay readable when interleaved.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace longhaul {

// A logger writing to stderr whose lines carry `site`. `level` is one of trace, debug,
// info, warn, error. The logger is not registered globally, so several may coexist.
std::shared_ptr<spdlog::logger> MakeSiteLogger(const std::string& site,
                                               const std::string& level = "info");

}  // namespace longhaul
