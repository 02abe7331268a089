// linkem: the shaping arithmetic, schedule parsing, and the proxy itself in front of an echo
// server (bytes intact, rate and delay imposed, connections dropped on command). Timing
// checks are lower bounds (shaping must never be faster than asked) with generous uppers.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <random>
#include <thread>

#include "tools/linkem/control.h"
#include "tools/linkem/proxy.h"
#include "tools/linkem/schedule.h"

namespace longhaul::linkem {
namespace {

TEST_CASE("the shaper serialises at the rate, then delays, never reordering") {
  Shaper s({8e6, 0.010, 0});  // 8 Mbit/s = 1 MB/s, 10 ms
  CHECK(s.Schedule(0.0, 1000000) == Approx(1.010));
  // The next chunk queues behind the first on the wire.
  CHECK(s.Schedule(0.5, 500000) == Approx(1.510));
  // After an idle gap the wire is free again.
  CHECK(s.Schedule(10.0, 1000) == Approx(10.011));

  Shaper j({0, 0.020, 0.015}, 7);
  double last = 0;
  for (int i = 0; i < 1000; ++i) {
    const double t = j.Schedule(i * 0.001, 100);
    CHECK(t >= last);                       // order kept
    CHECK(t >= i * 0.001 + 0.005 - 1e-12);  // delay - jitter at least
    CHECK(t <= i * 0.001 + 0.035 + 0.02);   // delay + jitter (plus order-keeping slack)
    last = t;
  }
}

TEST_CASE("rates and durations parse, and bad ones are refused") {
  CHECK(ParseRate("200mbit") == 200e6);
  CHECK(ParseRate("1.5gbit") == 1.5e9);
  CHECK(ParseRate("800kbit") == 800e3);
  CHECK(ParseRate("unlimited") == 0);
  CHECK(ParseRate("fast") < 0);
  CHECK(ParseRate("10mb") < 0);
  CHECK(ParseDuration("20ms") == Approx(0.020));
  CHECK(ParseDuration("1.5s") == 1.5);
  CHECK(ParseDuration("250us") == Approx(250e-6));
  CHECK(ParseDuration("0") == 0);
  CHECK(ParseDuration("20") < 0);  // a unit is required
}

TEST_CASE("schedules parse in time order and errors name the line") {
  auto s =
      ParseSchedule("# comment\n60 rate=20mbit\n0 rate=200mbit delay=5ms\n90 drop\n", "falls.txt");
  REQUIRE(s.ok());
  REQUIRE(s->size() == 3);
  CHECK((*s)[0].at_seconds == 0);
  CHECK(*(*s)[0].up_rate == 200e6);
  CHECK(*(*s)[0].down_delay == Approx(0.005));
  CHECK(*(*s)[1].down_rate == 20e6);
  CHECK((*s)[2].drop);
  LinkParams up, down;
  (*s)[1].ApplyTo(&up, &down);
  CHECK(up.rate_bits_per_second == 20e6);

  auto up_only = ParseChange({"up_rate=5mbit"});
  REQUIRE(up_only.ok());
  CHECK(up_only->up_rate.has_value());
  CHECK_FALSE(up_only->down_rate.has_value());

  auto bad = ParseSchedule("0 rate=200mbit\n10 speed=3\n", "x.txt");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::StartsWith("x.txt:2: unknown key"));
  auto bad_time = ParseSchedule("soon rate=1mbit\n", "y.txt");
  CHECK_THAT(std::string(bad_time.status().message()), Catch::Contains("y.txt:1: expected a time"));
  CHECK_FALSE(ParseSchedule("5\n", "z.txt").ok());
  CHECK_FALSE(ParseSchedule("5 rate=lots\n", "z.txt").ok());
}

// A TCP echo server on 127.0.0.1.
class Echo {
 public:
  Echo() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    ::listen(fd_, 8);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      int c;
      while ((c = ::accept(fd_, nullptr, nullptr)) >= 0) {
        std::thread([c] {
          char buf[65536];
          ssize_t n;
          while ((n = ::recv(c, buf, sizeof buf, 0)) > 0) {
            if (::send(c, buf, n, MSG_NOSIGNAL) != n) break;
          }
          ::close(c);
        }).detach();
      }
    });
  }
  ~Echo() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int fd_;
  int port_;
  std::thread thread_;
};

int Dial(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

// Sends `data` and reads the same number of bytes back; returns them.
std::string RoundTrip(int fd, const std::string& data) {
  std::thread sender(
      [&] { REQUIRE(::send(fd, data.data(), data.size(), MSG_NOSIGNAL) == (ssize_t)data.size()); });
  std::string got;
  char buf[65536];
  while (got.size() < data.size()) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, n);
  }
  sender.join();
  return got;
}

double Seconds(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::unique_ptr<Proxy> StartProxy(int target_port, LinkParams up, LinkParams down) {
  ProxyOptions o;
  o.listen = "127.0.0.1:0";
  o.target = "127.0.0.1:" + std::to_string(target_port);
  o.up = up;
  o.down = down;
  auto p = Proxy::Start(o);
  REQUIRE(p.ok());
  return std::move(*p);
}

TEST_CASE("bytes cross the proxy intact, at no more than the set rate") {
  Echo echo;
  // 40 Mbit/s up, unlimited down: 1.5 MB takes at least 0.3 s.
  auto p = StartProxy(echo.port(), {40e6, 0, 0}, {0, 0, 0});
  std::string data(1500000, '\0');
  std::mt19937 rng(3);
  for (auto& ch : data) ch = static_cast<char>(rng());
  const int fd = Dial(p->port());
  const auto start = std::chrono::steady_clock::now();
  const std::string got = RoundTrip(fd, data);
  const double elapsed = Seconds(start);
  ::close(fd);
  CHECK(got == data);
  INFO("elapsed " << elapsed << " s, expected about 0.3 s");
  CHECK(elapsed >= 0.3 * 0.95);  // the shaper's promise: never faster than the rate
  CHECK(p->stats().bytes_up == data.size());
}

TEST_CASE("the proxy delays each direction and changes rate on command") {
  Echo echo;
  auto p = StartProxy(echo.port(), {0, 0.040, 0}, {0, 0.030, 0});
  const int fd = Dial(p->port());
  const auto start = std::chrono::steady_clock::now();
  CHECK(RoundTrip(fd, "x") == "x");
  const double rtt = Seconds(start);
  CHECK(rtt >= 0.070);  // both delays were paid; how much longer it took is the machine's

  auto say = [](const std::string&) {};
  CHECK(ControlServer::Execute("set delay=0 up_rate=16mbit", p.get(), say) == "ok");
  LinkParams up, down;
  p->GetParams(&up, &down);
  CHECK(up.rate_bits_per_second == 16e6);
  CHECK(down.rate_bits_per_second == 0);
  CHECK(up.delay_seconds == 0);
  CHECK_THAT(ControlServer::Execute("set speed=1", p.get(), say), Catch::StartsWith("error"));
  CHECK_THAT(ControlServer::Execute("stats", p.get(), say), Catch::Contains("\"open\":1"));
  ::close(fd);
}

TEST_CASE("drop cuts every open connection, and new ones still work") {
  Echo echo;
  auto p = StartProxy(echo.port(), {}, {});
  const int fd = Dial(p->port());
  CHECK(RoundTrip(fd, "hello") == "hello");
  auto say = [](const std::string&) {};
  CHECK(ControlServer::Execute("drop", p.get(), say) == "ok dropped 1");
  char buf[16];
  CHECK(::recv(fd, buf, sizeof buf, 0) <= 0);  // the connection is gone
  ::close(fd);
  const int fd2 = Dial(p->port());
  CHECK(RoundTrip(fd2, "again") == "again");
  ::close(fd2);
  CHECK(p->stats().drops == 1);
}

}  // namespace
}  // namespace longhaul::linkem
