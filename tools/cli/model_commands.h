// `longhaul eval` and `longhaul train-local`: commands that run the model in this process
// (no daemon): evaluate a checkpoint on a data file, and train a job locally.
#pragma once

#include <CLI/CLI.hpp>

namespace longhaul::cli {

// Adds the commands to `app`; `*exit_code` gets the result of whichever command ran.
void AddModelCommands(CLI::App& app, int* exit_code);

}  // namespace longhaul::cli
