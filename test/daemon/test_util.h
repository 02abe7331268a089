// Helpers for tests that run real daemons in-process on loopback: free ports, site configs
// built in code, waiting for a condition, and a minimal HTTP GET.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/config.h"

namespace longhaul::testing {

// A TCP port on 127.0.0.1 that was free a moment ago, below the ephemeral range (so no
// outgoing connection takes it meanwhile).
int FreePort();

// A directory under $TEST_TMPDIR (or /tmp) unique to this call.
std::string TempDir(const std::string& name);

struct SiteSpec {
  std::string name;
  int peer_port = 0;
  std::vector<std::pair<std::string, int>> peers;  // name, peer port
};

// A config on 127.0.0.1 with fast timings (heartbeat 0.1 s, small probes, quick backoff).
daemon::SiteConfig MakeSiteConfig(const SiteSpec& spec);

// Polls `pred` every 20 ms until it holds or `timeout` passes; returns its last value.
bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout);

struct HttpResult {
  int status = 0;  // 0 when the request failed
  std::string content_type;
  std::string body;
};
HttpResult HttpGet(int port, const std::string& path);

// Runs a shell command, returns its exit status and (in *output) stdout+stderr.
int RunCommand(const std::string& command, std::string* output);

// A valid fp32 compression frame of zeros of `shape`, as a peer would send a tensor.
std::vector<uint8_t> ZeroFrame(const std::vector<int64_t>& shape);

}  // namespace longhaul::testing
