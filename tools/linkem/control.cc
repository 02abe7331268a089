#include "tools/linkem/control.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "tools/linkem/schedule.h"

namespace longhaul::linkem {

std::string ControlServer::Execute(const std::string& line, Proxy* proxy,
                                   const std::function<void(const std::string&)>& say) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  if (w.empty()) return "error: empty command (try help)";
  if (w[0] == "help") return "commands: drop | set KEY=VALUE... | stats | help";
  if (w[0] == "drop") {
    const int n = proxy->DropConnections();
    say("control: dropped " + std::to_string(n) + " connection(s)");
    return "ok dropped " + std::to_string(n);
  }
  if (w[0] == "stats") {
    const ProxyStats s = proxy->stats();
    std::ostringstream o;
    o << "{\"connections\":" << s.connections << ",\"open\":" << s.open
      << ",\"bytes_up\":" << s.bytes_up << ",\"bytes_down\":" << s.bytes_down
      << ",\"drops\":" << s.drops << "}";
    return o.str();
  }
  if (w[0] == "set") {
    auto change = ParseChange({w.begin() + 1, w.end()});
    if (!change.ok()) return "error: " + std::string(change.status().message());
    LinkParams up, down;
    proxy->GetParams(&up, &down);
    change->ApplyTo(&up, &down);
    proxy->SetParams(up, down);
    if (change->drop) proxy->DropConnections();
    say("control: " + line);
    return "ok";
  }
  return "error: unknown command '" + w[0] + "' (try help)";
}

StatusOr<std::unique_ptr<ControlServer>> ControlServer::Start(
    const std::string& address, Proxy* proxy, std::function<void(const std::string&)> say) {
  auto cs = std::unique_ptr<ControlServer>(new ControlServer());
  cs->proxy_ = proxy;
  cs->say_ = std::move(say);
  const size_t colon = address.rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    return absl::InvalidArgumentError("--control: expected IPv4:port, got '" + address + "'");
  }
  addr.sin_port = htons(std::atoi(address.substr(colon + 1).c_str()));
  cs->fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(cs->fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(cs->fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(cs->fd_, 8) != 0) {
    return absl::UnavailableError("--control: cannot listen on " + address + ": " +
                                  strerror(errno));
  }
  socklen_t len = sizeof addr;
  ::getsockname(cs->fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  cs->port_ = ntohs(addr.sin_port);
  cs->thread_ = std::thread([raw = cs.get()] { raw->Loop(); });
  return cs;
}

ControlServer::~ControlServer() { Stop(); }

void ControlServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
}

void ControlServer::Loop() {
  while (!stopping_) {
    pollfd pfd{fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) continue;
    const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    timeval tv{5, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string buf;
    char chunk[1024];
    ssize_t n;
    // One connection may send several commands; each line gets one reply line.
    while (!stopping_ && (n = ::recv(c, chunk, sizeof chunk, 0)) > 0) {
      buf.append(chunk, n);
      size_t nl;
      while ((nl = buf.find('\n')) != std::string::npos) {
        const std::string reply = Execute(buf.substr(0, nl), proxy_, say_) + "\n";
        buf.erase(0, nl + 1);
        (void)!::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      }
    }
    ::close(c);
  }
}

}  // namespace longhaul::linkem
