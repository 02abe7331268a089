// Job commands: submit (optionally following progress live), jobs, status, cancel, export.
#pragma once

#include <CLI/CLI.hpp>

#include "tools/cli/client.h"

namespace longhaul::cli {

void AddJobCommands(CLI::App& app, ClientOptions& options, int* exit_code);

}  // namespace longhaul::cli
