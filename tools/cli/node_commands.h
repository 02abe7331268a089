// `longhaul node status` and `longhaul links`: what a daemon knows about itself and its links.
#pragma once

#include <CLI/CLI.hpp>

#include "tools/cli/client.h"

namespace longhaul::cli {

// Adds the commands to `app`; `options` is filled by the global flags; `*exit_code` gets
// the result of whichever command ran.
void AddNodeCommands(CLI::App& app, ClientOptions& options, int* exit_code);

}  // namespace longhaul::cli
