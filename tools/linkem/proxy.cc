#include "tools/linkem/proxy.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <vector>

namespace longhaul::linkem {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kChunk = 16 << 10;

double Now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// Resolves "host:port" ("[v6]:port" too) for bind (passive) or connect.
StatusOr<addrinfo*> Resolve(const std::string& address, bool passive) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError("expected host:port, got '" + address + "'");
  }
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::InvalidArgumentError("cannot resolve '" + address + "': " + gai_strerror(rc));
  }
  return res;
}

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::send(fd, data, n, MSG_NOSIGNAL);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

struct Proxy::Direction {
  explicit Direction(const LinkParams& p, uint64_t seed) : shaper(p, seed) {}
  std::mutex mu;
  Shaper shaper;
};

struct Proxy::Connection {
  int fds[2] = {-1, -1};  // [0] the connecting side, [1] the target
  std::atomic<bool> dead{false};
  std::atomic<int> finished{0};  // pump threads done (4 = all)
  std::vector<std::thread> threads;
  struct Queue {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<double, std::string>> items;  // delivery time, bytes ("" = EOF)
    size_t bytes = 0;
  } queues[2];  // [0] up, [1] down

  void Kill() {
    if (dead.exchange(true)) return;
    for (int fd : fds) ::shutdown(fd, SHUT_RDWR);
    for (auto& q : queues) {
      std::lock_guard<std::mutex> lock(q.mu);
      q.cv.notify_all();
    }
  }
};

Proxy::Proxy(ProxyOptions options) : options_(std::move(options)) {
  up_ = std::make_unique<Direction>(options_.up, 1);
  down_ = std::make_unique<Direction>(options_.down, 2);
}

StatusOr<std::unique_ptr<Proxy>> Proxy::Start(const ProxyOptions& options) {
  std::unique_ptr<Proxy> p(new Proxy(options));
  ASSIGN_OR_RETURN(addrinfo * res, Resolve(options.listen, true));
  p->listen_fd_ = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(p->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const int rc = ::bind(p->listen_fd_, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 || ::listen(p->listen_fd_, 64) != 0) {
    return absl::UnavailableError("linkem: cannot listen on " + options.listen + ": " +
                                  strerror(errno));
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(p->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  p->port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  p->accept_thread_ = std::thread([raw = p.get()] { raw->AcceptLoop(); });
  return p;
}

Proxy::~Proxy() { Stop(); }

void Proxy::SetParams(const LinkParams& up, const LinkParams& down) {
  {
    std::lock_guard<std::mutex> lock(up_->mu);
    up_->shaper.set_params(up);
  }
  std::lock_guard<std::mutex> lock(down_->mu);
  down_->shaper.set_params(down);
}

void Proxy::GetParams(LinkParams* up, LinkParams* down) const {
  {
    std::lock_guard<std::mutex> lock(up_->mu);
    *up = up_->shaper.params();
  }
  std::lock_guard<std::mutex> lock(down_->mu);
  *down = down_->shaper.params();
}

int Proxy::DropConnections() {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (auto& c : connections_) {
    if (!c->dead) {
      c->Kill();
      ++n;
    }
  }
  stats_.drops += n;
  return n;
}

ProxyStats Proxy::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ProxyStats s = stats_;
  s.open = 0;
  for (const auto& c : connections_) s.open += !c->dead;
  return s;
}

void Proxy::Reap() {
  std::list<std::shared_ptr<Connection>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if ((*it)->finished == 4) {
        done.push_back(*it);
        it = connections_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : done) {
    for (auto& t : c->threads) t.join();
    for (int fd : c->fds) ::close(fd);
  }
}

void Proxy::AcceptLoop() {
  while (!stopping_) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, 100) <= 0) {
      Reap();
      continue;
    }
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    auto res = Resolve(options_.target, false);
    int target = -1;
    if (res.ok()) {
      for (addrinfo* a = *res; a && target < 0; a = a->ai_next) {
        target = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (::connect(target, a->ai_addr, a->ai_addrlen) != 0) {
          ::close(target);
          target = -1;
        }
      }
      freeaddrinfo(*res);
    }
    if (target < 0) {  // target down: refuse, as a dead link would
      ::close(client);
      continue;
    }
    const int one = 1;
    ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    ::setsockopt(target, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    auto c = std::make_shared<Connection>();
    c->fds[0] = client;
    c->fds[1] = target;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.connections;
      connections_.push_back(c);
      c->threads.emplace_back([this, c] { Pump(c, true); });
      c->threads.emplace_back([this, c] { Pump(c, false); });
    }
    Reap();
  }
}

// Runs the reader of one direction on this thread and its writer on a helper thread.
void Proxy::Pump(std::shared_ptr<Connection> c, bool up) {
  const int src = c->fds[up ? 0 : 1], dst = c->fds[up ? 1 : 0];
  Direction& dir = up ? *up_ : *down_;
  auto& q = c->queues[up ? 0 : 1];
  std::thread writer([this, c, dst, &q, up] {
    while (true) {
      std::pair<double, std::string> item;
      {
        std::unique_lock<std::mutex> lock(q.mu);
        q.cv.wait(lock, [&] { return c->dead || !q.items.empty(); });
        if (c->dead) break;
        item = std::move(q.items.front());
        q.items.pop_front();
        q.bytes -= item.second.size();
        q.cv.notify_all();
      }
      const double wait = item.first - Now();
      if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
      if (item.second.empty()) {  // EOF: pass the half-close on
        ::shutdown(dst, SHUT_WR);
        break;
      }
      if (c->dead) break;
      {
        // Counted as they are handed on, before the write: once the far end has them, so do
        // the stats (the other order let a reader that saw the bytes arrive see them uncounted).
        std::lock_guard<std::mutex> lock(mu_);
        (up ? stats_.bytes_up : stats_.bytes_down) += item.second.size();
      }
      if (!WriteAll(dst, item.second.data(), item.second.size())) {
        c->Kill();
        break;
      }
    }
    ++c->finished;
  });
  std::string buf(kChunk, '\0');
  while (!c->dead) {
    const ssize_t n = ::recv(src, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    double delivery;
    size_t cap;
    {
      std::lock_guard<std::mutex> lock(dir.mu);
      delivery = dir.shaper.Schedule(Now(), n > 0 ? n : 0);
      const LinkParams& p = dir.shaper.params();
      // A router-like queue: what the link carries in its delay plus 50 ms of backlog.
      cap = p.rate_bits_per_second > 0
                ? static_cast<size_t>(p.rate_bits_per_second / 8 *
                                      (p.delay_seconds + p.jitter_seconds + 0.05)) +
                      (64 << 10)
                : (8 << 20);
    }
    std::unique_lock<std::mutex> lock(q.mu);
    if (n <= 0) {
      if (n < 0) {
        lock.unlock();
        c->Kill();
      } else {
        q.items.emplace_back(delivery, std::string());
        q.cv.notify_all();
      }
      break;
    }
    q.cv.wait(lock, [&] { return c->dead || q.bytes < cap; });
    q.items.emplace_back(delivery, std::string(buf.data(), n));
    q.bytes += n;
    q.cv.notify_all();
  }
  ++c->finished;
  writer.join();
}

void Proxy::Stop() {
  if (stopping_.exchange(true)) return;
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<std::shared_ptr<Connection>> connections;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : connections_) c->Kill();
    connections.swap(connections_);
  }
  // Joined without the lock: pump threads take it to count bytes.
  for (auto& c : connections) {
    for (auto& t : c->threads) t.join();
    for (int fd : c->fds) ::close(fd);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

}  // namespace longhaul::linkem
