// linkem: a wide-area link emulator. A TCP proxy that sits between two daemons (point a
// site config's peer address at it) and imposes a rate, a one-way delay and jitter per
// direction, drops connections on command, and changes its settings over time from a
// schedule file. netem is not available here, so delay is emulated in user space.
//
//   linkem --listen 127.0.0.1:9101 --target 127.0.0.1:7101 --rate 25mbit --delay 20ms
//   linkem ... --schedule falls.txt          # e.g. "0 rate=200mbit" then "60 rate=20mbit"
//   linkem ... --control 127.0.0.1:9199      # then: echo drop | nc 127.0.0.1 9199
// SIGUSR1 also drops every open connection.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>

#include "tools/linkem/control.h"
#include "tools/linkem/proxy.h"
#include "tools/linkem/schedule.h"

using longhaul::linkem::LinkParams;

namespace {

std::string Describe(const LinkParams& p) {
  std::ostringstream s;
  if (p.rate_bits_per_second > 0) {
    s << p.rate_bits_per_second / 1e6 << " Mbit/s";
  } else {
    s << "unlimited";
  }
  s << ", delay " << p.delay_seconds * 1e3 << " ms";
  if (p.jitter_seconds > 0) s << " +- " << p.jitter_seconds * 1e3 << " ms";
  return s.str();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"linkem: emulate a wide-area link between two longhaul daemons (a TCP proxy)"};
  std::string listen, target, schedule_path, control;
  std::string rate = "unlimited", up_rate, down_rate, delay = "0", up_delay, down_delay;
  std::string jitter = "0";
  bool quiet = false;
  app.add_option("--listen", listen, "host:port to accept connections on")->required();
  app.add_option("--target", target, "host:port to forward them to")->required();
  app.add_option("--rate", rate, "Rate both ways, e.g. 200mbit, 1gbit, unlimited")
      ->capture_default_str();
  app.add_option("--up-rate", up_rate, "Rate from the connecting side to the target");
  app.add_option("--down-rate", down_rate, "Rate from the target back");
  app.add_option("--delay", delay, "One-way delay both ways, e.g. 20ms")->capture_default_str();
  app.add_option("--up-delay", up_delay, "One-way delay towards the target");
  app.add_option("--down-delay", down_delay, "One-way delay back");
  app.add_option("--jitter", jitter, "Delay jitter (uniform +-), e.g. 2ms")->capture_default_str();
  app.add_option("--schedule", schedule_path, "File of timed changes (see schedule.h)");
  app.add_option("--control", control,
                 "host:port for commands: drop | set KEY=VALUE... | stats | help");
  app.add_flag("-q,--quiet", quiet, "Print nothing but errors");
  CLI11_PARSE(app, argc, argv);

  // Command-line settings are the change at time zero.
  std::vector<std::string> words = {"rate=" + rate, "delay=" + delay, "jitter=" + jitter};
  if (!up_rate.empty()) words.push_back("up_rate=" + up_rate);
  if (!down_rate.empty()) words.push_back("down_rate=" + down_rate);
  if (!up_delay.empty()) words.push_back("up_delay=" + up_delay);
  if (!down_delay.empty()) words.push_back("down_delay=" + down_delay);
  auto initial = longhaul::linkem::ParseChange(words);
  if (!initial.ok()) {
    std::cerr << "linkem: " << initial.status().message() << "\n";
    return 2;
  }
  std::vector<longhaul::linkem::LinkChange> schedule;
  if (!schedule_path.empty()) {
    auto s = longhaul::linkem::LoadSchedule(schedule_path);
    if (!s.ok()) {
      std::cerr << "linkem: " << s.status().message() << "\n";
      return 2;
    }
    schedule = *s;
  }

  longhaul::linkem::ProxyOptions options;
  options.listen = listen;
  options.target = target;
  initial->ApplyTo(&options.up, &options.down);
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto proxy = longhaul::linkem::Proxy::Start(options);
  if (!proxy.ok()) {
    std::cerr << proxy.status().message() << "\n";
    return 1;
  }
  auto& p = **proxy;
  auto say = [&](const std::string& what) {
    if (!quiet) std::cerr << "linkem " << listen << " -> " << target << ": " << what << "\n";
  };
  say("up " + Describe(options.up) + "; down " + Describe(options.down));

  std::unique_ptr<longhaul::linkem::ControlServer> control_server;
  if (!control.empty()) {
    auto cs = longhaul::linkem::ControlServer::Start(control, &p, say);
    if (!cs.ok()) {
      std::cerr << "linkem: " << cs.status().message() << "\n";
      return 1;
    }
    control_server = std::move(*cs);
  }

  const auto start = std::chrono::steady_clock::now();
  size_t next = 0;
  while (true) {
    double wait = 3600;
    if (next < schedule.size()) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      wait = std::max(0.0, schedule[next].at_seconds - elapsed);
    }
    timespec ts{static_cast<time_t>(wait), static_cast<long>((wait - (time_t)wait) * 1e9)};
    const int sig = sigtimedwait(&signals, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT) break;
    if (sig == SIGUSR1) {
      say("SIGUSR1: dropped " + std::to_string(p.DropConnections()) + " connection(s)");
      continue;
    }
    if (sig < 0 && next < schedule.size()) {
      const auto& change = schedule[next++];
      LinkParams up, down;
      p.GetParams(&up, &down);
      change.ApplyTo(&up, &down);
      p.SetParams(up, down);
      std::string what = "t=" + std::to_string(static_cast<int>(change.at_seconds)) + "s: up " +
                         Describe(up) + "; down " + Describe(down);
      if (change.drop) what += "; dropped " + std::to_string(p.DropConnections()) + " conn.";
      say(what);
    }
  }
  if (control_server) control_server->Stop();
  p.Stop();
  return 0;
}
