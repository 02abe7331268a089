// Fuzz target: the status endpoint's HTTP handling (daemon/http/status_server.h), over a real
// loopback connection: each input is sent raw to a running server, which must answer or
// close, and keep serving: every 64 inputs a clean GET /healthz must succeed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "daemon/http/status_server.h"

namespace {

using longhaul::http::HttpResponse;
using longhaul::http::StatusServer;

int Port() {
  static std::unique_ptr<StatusServer> server = [] {
    std::map<std::string, longhaul::http::HttpHandler> handlers;
    handlers["/healthz"] = [] { return HttpResponse{200, "text/plain", "ok\n"}; };
    handlers["/status"] = [] { return HttpResponse{200, "application/json", "{}"}; };
    auto s = StatusServer::Start("127.0.0.1:0", std::move(handlers));
    if (!s.ok()) std::abort();
    return std::move(*s);
  }();
  return server->port();
}

// Sends `request`, closes the sending side, reads until the server closes (or 2 s pass).
std::string Exchange(const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) std::abort();
  timeval tv{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(Port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) std::abort();
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t w = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (w <= 0) break;
    sent += static_cast<size_t>(w);
  }
  ::shutdown(fd, SHUT_WR);
  std::string reply;
  char buf[4096];
  while (true) {
    const ssize_t r = ::recv(fd, buf, sizeof buf, 0);
    if (r <= 0) break;
    reply.append(buf, static_cast<size_t>(r));
    if (reply.size() > (1 << 20)) break;
  }
  ::close(fd);
  return reply;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static int calls = 0;
  Exchange(std::string(reinterpret_cast<const char*>(data), size));
  if (++calls % 64 == 0) {
    const std::string ok =
        Exchange("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    if (ok.rfind("HTTP/1.1 200", 0) != 0) std::abort();
  }
  return 0;
}

extern "C" void LonghaulFuzzSeeds(std::vector<std::string>* seeds) {
  seeds->push_back("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  seeds->push_back("HEAD /status?x=1 HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n");
  seeds->push_back("POST /status HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello");
  seeds->push_back("GET /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  seeds->push_back("GET / HTTP/1.0\r\n" + std::string(9000, 'X') + ": y\r\n\r\n");
}
