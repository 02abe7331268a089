// longhauld: the per-site daemon. Loads the site config, serves the peer and control gRPC
// APIs and the status endpoint, and keeps links to the configured peers measured.
// Under systemd (Type=notify) it reports READY once serving and STOPPING on SIGTERM, then
// completes in-flight RPCs before exiting.
#include <fcntl.h>
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "common/version.h"
#include "daemon/config.h"
#include "daemon/daemon.h"
#include "daemon/job/site/site_backend.h"
#include "daemon/tls_checks.h"

namespace {

int g_signal_pipe[2] = {-1, -1};

void OnSignal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  (void)!write(g_signal_pipe[1], &b, 1);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"longhauld: the longhaul site daemon (one per datacenter)"};
  std::string config_path;
  std::string log_level;
  bool check_only = false;
  double grace = 10.0;
  app.add_option("-c,--config", config_path, "Site config (YAML); see configs/site.example.yaml")
      ->required();
  app.add_option("--log-level", log_level, "Override log_level: trace|debug|info|warn|error");
  app.add_flag("--check", check_only, "Validate the config and exit (0 = valid)");
  app.add_option("--shutdown-grace", grace, "Seconds in-flight RPCs get to finish after SIGTERM")
      ->capture_default_str();
  app.set_version_flag("--version", std::string("longhauld ") + longhaul::kBuildVersion);
  CLI11_PARSE(app, argc, argv);

  auto config = longhaul::daemon::LoadSiteConfig(config_path);
  if (!config.ok()) {
    std::cerr << "longhauld: invalid config: " << config.status().message() << "\n";
    return 2;
  }
  if (!log_level.empty()) config->log_level = log_level;
  if (check_only) {
    // The same checks of the TLS files as Daemon::Start makes before it listens.
    if (config->tls) {
      const auto tls = longhaul::daemon::CheckTlsMaterial(*config->tls, config->site);
      if (!tls.ok()) {
        std::cerr << "longhauld: invalid config: " << config_path << ": site '" << config->site
                  << "': " << tls.message() << "\n";
        return 2;
      }
    }
    // The same check of the devices as the start makes (the CUDA backend, driver, GPU N).
    if (const auto devices = longhaul::CheckSiteDevices(config->devices); !devices.ok()) {
      std::cerr << "longhauld: invalid config: " << config_path << ": site '" << config->site
                << "': " << devices.message() << "\n";
      return 2;
    }
    std::cout << "config " << config_path << " is valid (site '" << config->site << "', "
              << config->peers.size() << " peer(s))\n";
    return 0;
  }

  // SIGTERM and SIGINT may land on any thread (libraries such as OpenBLAS start threads
  // before main), so the handler only writes the signal number to a pipe that this thread
  // reads.
  if (pipe2(g_signal_pipe, O_CLOEXEC) != 0) {
    std::perror("longhauld: pipe");
    return 1;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto daemon = longhaul::daemon::Daemon::Start(*config);
  if (!daemon.ok()) {
    std::cerr << "longhauld: cannot start: " << daemon.status().message() << "\n";
    sd_notifyf(0, "STATUS=failed: %s", std::string(daemon.status().message()).c_str());
    return 1;
  }
  sd_notifyf(0, "READY=1\nSTATUS=serving site %s", config->site.c_str());

  unsigned char sig = 0;
  while (read(g_signal_pipe[0], &sig, 1) != 1) {
  }
  sd_notify(0, "STOPPING=1\nSTATUS=stopping");
  std::cerr << "longhauld: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
            << ": finishing in-flight requests\n";
  // Shutdown always ends within the grace period and a few seconds more: a stage blocked on
  // a peer that does not answer must not keep the daemon alive. Checkpoints and job records
  // are written atomically, so exiting then loses nothing committed.
  std::thread([grace] {
    std::this_thread::sleep_for(std::chrono::duration<double>(grace + 5));
    static const char msg[] = "longhauld: shutdown did not finish in time; exiting\n";
    (void)!write(2, msg, sizeof msg - 1);
    std::_Exit(0);
  }).detach();
  (*daemon)->Shutdown(grace);
  return 0;
}
