#include "test/daemon/test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "compression/codec.h"
#include "compression/frame.h"

namespace longhaul::testing {

namespace {

// Whether a listening socket could take `port` on 127.0.0.1 now.
bool CanBind(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// The lowest port the kernel hands out as the local end of outgoing connections.
int EphemeralLow() {
  int low = 32768, high = 60999;
  if (FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
    if (std::fscanf(f, "%d %d", &low, &high) != 2) low = 32768;
    std::fclose(f);
  }
  return low;
}

}  // namespace

// Below the ephemeral range: a port the kernel picked with bind(0) can meanwhile become the
// source port of some daemon's outgoing connection, and the test's listen then fails. The
// search starts at a place drawn per process and call, so that tests running side by side
// rarely try the same ports.
int FreePort() {
  constexpr int kLowest = 10000;
  const int span = std::max(1000, EphemeralLow() - kLowest);
  static std::atomic<int> calls{0};
  const int start = static_cast<int>(
      (static_cast<uint64_t>(::getpid()) * 7919 + static_cast<uint64_t>(calls++) * 104729) %
      static_cast<uint64_t>(span));
  for (int i = 0; i < span; ++i) {
    const int port = kLowest + (start + i) % span;
    if (CanBind(port)) return port;
  }
  return 0;
}

std::string TempDir(const std::string& name) {
  static std::atomic<int> counter{0};
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/" + name + "." +
                    std::to_string(::getpid()) + "." + std::to_string(counter++);
  std::filesystem::create_directories(dir);
  return dir;
}

daemon::SiteConfig MakeSiteConfig(const SiteSpec& spec) {
  daemon::SiteConfig c;
  c.source = "test:" + spec.name;
  c.site = spec.name;
  c.peer_listen = "127.0.0.1:" + std::to_string(spec.peer_port ? spec.peer_port : FreePort());
  c.control_listen = "127.0.0.1:0";
  c.status_listen = "127.0.0.1:0";
  for (const auto& [name, port] : spec.peers) {
    c.peers.push_back({name, "127.0.0.1:" + std::to_string(port)});
  }
  c.data_dir = TempDir("data-" + spec.name);
  c.devices = {"cpu"};
  c.log_level = "warn";
  c.links.heartbeat_interval_seconds = 0.1;
  c.links.probe_interval_seconds = 0.5;
  c.links.probe_bytes = 256 << 10;
  c.links.reconnect_initial_seconds = 0.05;
  c.links.reconnect_max_seconds = 0.5;
  return c;
}

bool WaitFor(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

HttpResult HttpGet(int port, const std::string& path) {
  HttpResult r;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return r;
  }
  const std::string req =
      "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string resp;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) resp.append(buf, n);
  ::close(fd);
  const size_t head_end = resp.find("\r\n\r\n");
  if (head_end == std::string::npos || resp.size() < 12) return r;
  r.status = std::atoi(resp.substr(9, 3).c_str());
  const std::string head = resp.substr(0, head_end);
  const size_t ct = head.find("Content-Type: ");
  if (ct != std::string::npos)
    r.content_type = head.substr(ct + 14, head.find("\r\n", ct) - ct - 14);
  r.body = resp.substr(head_end + 4);
  return r;
}

int RunCommand(const std::string& command, std::string* output) {
  output->clear();
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::vector<uint8_t> ZeroFrame(const std::vector<int64_t>& shape) {
  uint64_t count = 1;
  for (int64_t d : shape) count *= static_cast<uint64_t>(d);
  const std::vector<float> zeros(count, 0.0f);
  std::vector<uint8_t> frame;
  auto fp32 = compression::MakeCodec("fp32");
  if (!fp32.ok() || !compression::EncodeFrame(**fp32, zeros, shape, {}, &frame).ok()) std::abort();
  return frame;
}

}  // namespace longhaul::testing
