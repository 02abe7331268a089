// `longhaul data prepare` (text and JSON lines to token shards and a manifest, data/prepare.h)
// and `longhaul data inspect` (a manifest's shards, counts and a decoded sample).
#pragma once

#include <CLI/CLI.hpp>

#include "tools/cli/client.h"

namespace longhaul::cli {

// Adds the commands to `app`; `*exit_code` gets the result of whichever command ran.
void AddDataCommands(CLI::App& app, const ClientOptions& options, int* exit_code);

}  // namespace longhaul::cli
