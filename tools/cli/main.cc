// longhaul: the command-line client. Talks to a site's longhauld over the Control API.
// Exit codes: 0 ok, 1 error, 2 usage, 3 daemon unreachable, 4 token refused.
#include <CLI/CLI.hpp>
#include <iostream>

#include "common/version.h"
#include "tools/cli/client.h"
#include "tools/cli/data_commands.h"
#include "tools/cli/job_commands.h"
#include "tools/cli/model_commands.h"
#include "tools/cli/node_commands.h"
#include "tools/cli/plan_command.h"

int main(int argc, char** argv) {
  using namespace longhaul::cli;  // NOLINT(google-build-using-namespace)
  CLI::App app{"longhaul: train one model across datacenters joined by slow links"};
  app.set_version_flag("--version", std::string("longhaul ") + longhaul::kBuildVersion);
  app.require_subcommand(1);
  // Global flags may come after the subcommand too: `longhaul links -o json`.
  app.fallthrough();
  ClientOptions options;
  app.add_option("--addr", options.addr,
                 "Daemon control address host:port (env LONGHAUL_ADDR; default 127.0.0.1:7102)");
  app.add_option("--token-file", options.token_file,
                 "File holding the site's bearer token (env LONGHAUL_TOKEN_FILE)");
  app.add_option("--config", options.config,
                 "Site config to take the control address, token file and TLS settings from");
  app.add_option("--tls-ca", options.tls_ca,
                 "CA file (PEM): reach the daemon over TLS (its tls: {control: true}) and check "
                 "its certificate (env LONGHAUL_TLS_CA)");
  app.add_option("--tls-name", options.tls_name,
                 "Site name the daemon's certificate must carry, when --addr is not that name "
                 "(env LONGHAUL_TLS_NAME)");
  app.add_option("-o,--output", options.output, "Output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_option("--timeout", options.timeout_seconds, "Seconds to wait for the daemon")
      ->capture_default_str();
  int exit_code = kExitOk;
  AddNodeCommands(app, options, &exit_code);
  AddModelCommands(app, &exit_code);
  AddJobCommands(app, options, &exit_code);
  AddPlanCommand(app, &exit_code);
  AddDataCommands(app, options, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitUsage;
  }
  return exit_code;
}
