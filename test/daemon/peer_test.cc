// Real daemons in one process on loopback: handshake acceptance and rejection, reconnection
// after a peer restarts, the Control API's token check, and the status endpoint.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "common/version.h"
#include "daemon/daemon.h"
#include "test/daemon/test_util.h"

namespace longhaul {
namespace {

using namespace std::chrono_literals;
using daemon::Daemon;
using daemon::DaemonOptions;
using testing::MakeSiteConfig;
using testing::WaitFor;

std::unique_ptr<Daemon> StartOrDie(const daemon::SiteConfig& c, DaemonOptions o = {}) {
  if (o.token.empty()) o.token = "secret-token";
  auto d = Daemon::Start(c, o);
  INFO(d.status().ToString());
  REQUIRE(d.ok());
  return std::move(*d);
}

daemon::LinkSnapshot LinkOf(Daemon& d, const std::string& peer) {
  for (auto& s : d.monitor().Snapshot()) {
    if (s.peer == peer) return s;
  }
  FAIL("no link to " << peer);
  return {};
}

v1::LinkState StateOf(Daemon& d, const std::string& peer) { return LinkOf(d, peer).state; }

TEST_CASE("two daemons handshake, measure their link both ways, and report it") {
  const int pa = testing::FreePort(), pb = testing::FreePort();
  auto a = StartOrDie(MakeSiteConfig({"alpha", pa, {{"beta", pb}}}));
  auto b = StartOrDie(MakeSiteConfig({"beta", pb, {{"alpha", pa}}}));
  REQUIRE(WaitFor([&] { return StateOf(*a, "beta") == v1::LINK_STATE_UP; }, 60s));
  REQUIRE(WaitFor([&] { return StateOf(*b, "alpha") == v1::LINK_STATE_UP; }, 60s));
  // Bandwidth probes and heartbeats fill both directions' estimates.
  REQUIRE(WaitFor(
      [&] {
        auto l = LinkOf(*a, "beta");
        return l.outbound.bandwidth_samples() > 0 && l.outbound.rtt_samples() > 0 &&
               l.inbound.bandwidth_samples() > 0;
      },
      60s));
  auto l = LinkOf(*a, "beta");
  CHECK(l.outbound.from_site() == "alpha");
  CHECK(l.outbound.to_site() == "beta");
  // A rate at all: how close it is to a link's belongs to netns_bandwidth_test (a probe on a
  // loaded machine under TSan may well read loopback below 1 MB/s).
  CHECK(l.outbound.bandwidth_bytes_per_second() > 0);
  CHECK(l.outbound.rtt_seconds() > 0);
  CHECK(l.inbound.from_site() == "beta");
  CHECK(a->NodeStatus().peers_up() == 1);
  // Each probe alpha sent is counted with its bytes (early ones too: a loopback probe far
  // below the one before asks for one).
  REQUIRE(WaitFor([&] { return LinkOf(*a, "beta").probes > 0; }, 60s));
  l = LinkOf(*a, "beta");
  CHECK(l.probe_bytes == l.probes * a->config().links.probe_bytes);
  CHECK(l.early_probes <= l.probes);
  const v1::ListLinksResponse listed = a->Links();
  REQUIRE(listed.links_size() == 1);
  CHECK(listed.links(0).probes() >= l.probes);
  CHECK(listed.links(0).probe_bytes() == listed.links(0).probes() * a->config().links.probe_bytes);
  // A transfer far below what such transfers usually move asks for an early probe, counted as
  // one (asked again until one lands between the periodic ones).
  REQUIRE(WaitFor(
      [&] {
        a->monitor().AddBandwidthSample("beta", 1 << 20, 0.01, true, /*backlogged=*/true);
        a->monitor().AddBandwidthSample("beta", 1 << 10, 0.01, true, /*backlogged=*/true);
        std::this_thread::sleep_for(20ms);
        return LinkOf(*a, "beta").early_probes > 0;
      },
      20s));
  l = LinkOf(*a, "beta");
  CHECK(l.early_probes <= l.probes);
}

TEST_CASE("a peer answering under another site name is rejected") {
  const int pa = testing::FreePort(), pg = testing::FreePort();
  // alpha believes `beta` lives at gamma's address.
  auto a = StartOrDie(MakeSiteConfig({"alpha", pa, {{"beta", pg}}}));
  auto g = StartOrDie(MakeSiteConfig({"gamma", pg, {{"alpha", pa}}}));
  REQUIRE(WaitFor([&] { return StateOf(*a, "beta") == v1::LINK_STATE_REJECTED; }, 60s));
  CHECK_THAT(LinkOf(*a, "beta").detail, Catch::Contains("this is site 'gamma'"));
  // gamma dials alpha, which does not list gamma as a peer.
  REQUIRE(WaitFor([&] { return StateOf(*g, "alpha") == v1::LINK_STATE_REJECTED; }, 60s));
  CHECK_THAT(LinkOf(*g, "alpha").detail, Catch::Contains("not a configured peer"));
}

TEST_CASE("a peer speaking another protocol version is rejected on both sides") {
  const int pa = testing::FreePort(), pb = testing::FreePort();
  auto a = StartOrDie(MakeSiteConfig({"alpha", pa, {{"beta", pb}}}));
  DaemonOptions future;
  future.protocol_version = kProtocolVersion + 1;
  auto b = StartOrDie(MakeSiteConfig({"beta", pb, {{"alpha", pa}}}), future);
  REQUIRE(WaitFor([&] { return StateOf(*a, "beta") == v1::LINK_STATE_REJECTED; }, 60s));
  CHECK_THAT(LinkOf(*a, "beta").detail, Catch::Contains("protocol version"));
  REQUIRE(WaitFor([&] { return StateOf(*b, "alpha") == v1::LINK_STATE_REJECTED; }, 60s));
  CHECK_THAT(LinkOf(*b, "alpha").detail, Catch::Contains("protocol version"));
}

TEST_CASE("a link goes down when the peer stops and comes back when it restarts") {
  const int pa = testing::FreePort(), pb = testing::FreePort();
  auto a = StartOrDie(MakeSiteConfig({"alpha", pa, {{"beta", pb}}}));
  auto beta_config = MakeSiteConfig({"beta", pb, {{"alpha", pa}}});
  auto b = StartOrDie(beta_config);
  REQUIRE(WaitFor([&] { return StateOf(*a, "beta") == v1::LINK_STATE_UP; }, 60s));
  CHECK(LinkOf(*a, "beta").reconnects == 0);

  b->Shutdown(0);
  b.reset();
  REQUIRE(WaitFor([&] { return StateOf(*a, "beta") == v1::LINK_STATE_DOWN; }, 60s));
  CHECK_FALSE(LinkOf(*a, "beta").detail.empty());

  b = StartOrDie(beta_config);
  REQUIRE(WaitFor([&] { return StateOf(*a, "beta") == v1::LINK_STATE_UP; }, 60s));
  CHECK(LinkOf(*a, "beta").reconnects == 1);
}

TEST_CASE("the control API requires the site's bearer token") {
  auto a = StartOrDie(MakeSiteConfig({"alpha", testing::FreePort(), {}}));
  auto stub = v1::Control::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(a->control_port()), grpc::InsecureChannelCredentials()));
  v1::NodeStatus status;
  {
    grpc::ClientContext ctx;
    auto s = stub->GetNodeStatus(&ctx, {}, &status);
    CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK_THAT(s.error_message(), Catch::Contains("missing bearer token"));
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer wrong-token!");
    auto s = stub->GetNodeStatus(&ctx, {}, &status);
    CHECK(s.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK_THAT(s.error_message(), Catch::Contains("refused"));
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer secret-token");
    auto s = stub->GetNodeStatus(&ctx, {}, &status);
    REQUIRE(s.ok());
    CHECK(status.site() == "alpha");
  }
}

TEST_CASE("the status endpoint serves health, metrics and JSON status") {
  const int pa = testing::FreePort(), pb = testing::FreePort();
  auto a = StartOrDie(MakeSiteConfig({"alpha", pa, {{"beta", pb}}}));
  auto b = StartOrDie(MakeSiteConfig({"beta", pb, {{"alpha", pa}}}));
  REQUIRE(WaitFor([&] { return LinkOf(*a, "beta").outbound.bandwidth_samples() > 0; }, 60s));

  auto health = testing::HttpGet(a->status_port(), "/healthz");
  CHECK(health.status == 200);
  CHECK(health.body == "ok\n");

  auto metrics = testing::HttpGet(a->status_port(), "/metrics");
  REQUIRE(metrics.status == 200);
  CHECK_THAT(metrics.content_type, Catch::StartsWith("text/plain; version=0.0.4"));
  CHECK_THAT(metrics.body, Catch::Contains("longhaul_peer_up{peer=\"beta\"} 1"));
  CHECK_THAT(
      metrics.body,
      Catch::Contains("longhaul_link_bandwidth_bytes_per_second{from=\"alpha\",to=\"beta\"}"));
  CHECK_THAT(metrics.body, Catch::Contains("longhaul_build_info{"));
  CHECK_THAT(metrics.body,
             Catch::Contains("longhaul_peer_probes_total{peer=\"beta\",kind=\"early\"} "));
  CHECK_THAT(metrics.body, Catch::Contains("longhaul_peer_probe_bytes_total{peer=\"beta\"}"));
  CHECK_THAT(metrics.body, Catch::Contains("longhaul_process_start_time_seconds "));

  // A real Prometheus parser accepts it.
  const std::string file = testing::TempDir("metrics") + "/metrics.txt";
  FILE* f = fopen(file.c_str(), "w");
  REQUIRE(f != nullptr);
  fwrite(metrics.body.data(), 1, metrics.body.size(), f);
  fclose(f);
  std::string out;
  const int rc = testing::RunCommand("promtool check metrics < " + file, &out);
  INFO("promtool said: " << out);
  CHECK(rc == 0);

  auto status = testing::HttpGet(a->status_port(), "/status");
  REQUIRE(status.status == 200);
  CHECK(status.content_type == "application/json");
  CHECK_THAT(status.body, Catch::Contains("\"site\": \"alpha\""));
  CHECK_THAT(status.body, Catch::Contains("\"state\": \"up\""));

  // The job histories the live page plots, and the page itself with its assets, built in.
  auto history = testing::HttpGet(a->status_port(), "/status/jobs");
  REQUIRE(history.status == 200);
  CHECK(history.content_type == "application/json");
  CHECK_THAT(history.body, Catch::Contains("{\"jobs\":[]}"));
  auto page = testing::HttpGet(a->status_port(), "/");
  REQUIRE(page.status == 200);
  CHECK(page.content_type == "text/html; charset=utf-8");
  CHECK_THAT(page.body, Catch::Contains("<script src=\"/assets/app.js\"></script>"));
  for (const char* asset : {"/assets/app.js", "/assets/graph.js", "/assets/style.css",
                            "/assets/uPlot.iife.min.js", "/assets/uPlot.min.css"}) {
    INFO(asset);
    auto r = testing::HttpGet(a->status_port(), asset);
    CHECK(r.status == 200);
    CHECK(r.body.size() > 500);
  }

  CHECK(testing::HttpGet(a->status_port(), "/nope").status == 404);
}

TEST_CASE("two daemons cannot share a data directory") {
  auto c = MakeSiteConfig({"alpha", testing::FreePort(), {}});
  auto a = StartOrDie(c);
  auto c2 = c;
  c2.peer_listen = "127.0.0.1:" + std::to_string(testing::FreePort());
  auto second = Daemon::Start(c2, {1, "t"});
  REQUIRE_FALSE(second.ok());
  CHECK_THAT(std::string(second.status().message()), Catch::Contains("held by another longhauld"));
}

TEST_CASE("a daemon whose listen address is taken fails to start, naming it") {
  auto a = StartOrDie(MakeSiteConfig({"alpha", testing::FreePort(), {}}));
  auto c = MakeSiteConfig({"beta", 0, {}});
  c.peer_listen = a->config().peer_listen;
  auto b = Daemon::Start(c, {0, "t"});
  REQUIRE_FALSE(b.ok());
  CHECK_THAT(std::string(b.status().message()), Catch::Contains("listen.peer"));
}

}  // namespace
}  // namespace longhaul
