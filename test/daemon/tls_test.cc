// Mutual TLS between daemons: certificates from tools/make-certs.sh; links come up only when
// both certificates come from the site CA and name the sites the configs expect.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <sstream>

#include "daemon/daemon.h"
#include "test/daemon/test_util.h"

namespace longhaul {
namespace {

using namespace std::chrono_literals;
using daemon::Daemon;

// Makes a CA in `dir` and certificates for `sites`.
std::string MakeCerts(const std::string& name, const std::string& sites) {
  const std::string dir = testing::TempDir(name);
  std::string out;
  const int rc = testing::RunCommand("tools/make-certs.sh " + dir + " " + sites, &out);
  INFO(out);
  REQUIRE(rc == 0);
  return dir;
}

daemon::TlsConfig Tls(const std::string& ca_dir, const std::string& cert_dir,
                      const std::string& cert_name) {
  return {ca_dir + "/ca.pem", cert_dir + "/" + cert_name + ".pem",
          cert_dir + "/" + cert_name + ".key"};
}

// `skip_tls_checks`: a site that plays a misconfigured or rogue peer starts anyway.
std::unique_ptr<Daemon> StartOrDie(daemon::SiteConfig c, bool skip_tls_checks = false) {
  daemon::DaemonOptions options;
  options.token = "token";
  options.skip_tls_checks = skip_tls_checks;
  auto d = Daemon::Start(c, options);
  INFO(d.status().ToString());
  REQUIRE(d.ok());
  return std::move(*d);
}

daemon::LinkSnapshot LinkOf(Daemon& d, const std::string& peer) {
  for (auto& s : d.monitor().Snapshot()) {
    if (s.peer == peer) return s;
  }
  return {};
}

struct Pair {
  daemon::SiteConfig alpha, beta;
};

Pair MakePair() {
  const int pa = testing::FreePort(), pb = testing::FreePort();
  return {testing::MakeSiteConfig({"alpha", pa, {{"beta", pb}}}),
          testing::MakeSiteConfig({"beta", pb, {{"alpha", pa}}})};
}

TEST_CASE("mutual TLS with certificates from the site CA brings the link up") {
  const std::string certs = MakeCerts("certs-ok", "alpha beta");
  Pair p = MakePair();
  p.alpha.tls = Tls(certs, certs, "alpha");
  p.beta.tls = Tls(certs, certs, "beta");
  auto a = StartOrDie(p.alpha);
  auto b = StartOrDie(p.beta);
  REQUIRE(testing::WaitFor([&] { return LinkOf(*a, "beta").state == v1::LINK_STATE_UP; }, 10s));
  REQUIRE(testing::WaitFor([&] { return LinkOf(*b, "alpha").state == v1::LINK_STATE_UP; }, 10s));
  CHECK(a->NodeStatus().tls());
}

TEST_CASE("a peer whose certificate comes from another CA never gets a link") {
  const std::string certs = MakeCerts("certs-main", "alpha beta");
  const std::string rogue = MakeCerts("certs-rogue", "beta");
  Pair p = MakePair();
  p.alpha.tls = Tls(certs, certs, "alpha");
  p.beta.tls = Tls(certs, rogue, "beta");  // trusts the right CA, presents a rogue cert
  auto a = StartOrDie(p.alpha);
  auto b = StartOrDie(p.beta, /*skip_tls_checks=*/true);
  REQUIRE(testing::WaitFor([&] { return LinkOf(*a, "beta").state == v1::LINK_STATE_DOWN; }, 10s));
  REQUIRE(testing::WaitFor(
      [&] {
        auto s = LinkOf(*b, "alpha").state;
        return s == v1::LINK_STATE_DOWN || s == v1::LINK_STATE_REJECTED;
      },
      10s));
  std::this_thread::sleep_for(1s);  // several reconnect attempts
  CHECK(LinkOf(*a, "beta").state != v1::LINK_STATE_UP);
  CHECK(LinkOf(*b, "alpha").state != v1::LINK_STATE_UP);
}

TEST_CASE("a peer whose certificate names another site is refused") {
  const std::string certs = MakeCerts("certs-name", "alpha beta gamma");
  Pair p = MakePair();
  p.alpha.tls = Tls(certs, certs, "alpha");
  p.beta.tls = Tls(certs, certs, "gamma");  // right CA, wrong name
  auto a = StartOrDie(p.alpha);
  auto b = StartOrDie(p.beta, /*skip_tls_checks=*/true);
  // beta's calls claim "beta" but its certificate says "gamma": alpha refuses them.
  REQUIRE(
      testing::WaitFor([&] { return LinkOf(*b, "alpha").state == v1::LINK_STATE_REJECTED; }, 10s));
  CHECK_THAT(LinkOf(*b, "alpha").detail, Catch::Contains("certificate names [gamma"));
  // alpha dials "beta" and is answered with a "gamma" certificate: the TLS handshake fails.
  REQUIRE(testing::WaitFor([&] { return LinkOf(*a, "beta").state == v1::LINK_STATE_DOWN; }, 10s));
  std::this_thread::sleep_for(500ms);
  CHECK(LinkOf(*a, "beta").state != v1::LINK_STATE_UP);
}

TEST_CASE("a site whose TLS files are wrong does not start, and says why") {
  const std::string certs = MakeCerts("certs-start", "alpha beta");
  Pair p = MakePair();
  // The key of another certificate: gRPC would only fail to listen ("address in use?").
  p.alpha.tls = Tls(certs, certs, "alpha");
  p.alpha.tls->key_file = certs + "/beta.key";
  auto mismatched = Daemon::Start(p.alpha, {0, "token"});
  REQUIRE_FALSE(mismatched.ok());
  const std::string message(mismatched.status().message());
  const std::string expected = "site 'alpha': tls.key '" + certs + "/beta.key' does not match " +
                               "tls.cert '" + certs + "/alpha.pem'";
  CHECK_THAT(message, Catch::StartsWith(expected));
  CHECK_THAT(message, !Catch::Contains("listen"));
  // Another site's certificate and key: gRPC would serve it, and peers would refuse it.
  p.alpha.tls = Tls(certs, certs, "beta");
  auto other = Daemon::Start(p.alpha, {0, "token"});
  REQUIRE_FALSE(other.ok());
  CHECK_THAT(std::string(other.status().message()),
             Catch::Contains("names 'beta' (CN/SAN), this site is 'alpha'"));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_CASE("a client without a certificate, or without TLS, is refused") {
  const std::string certs = MakeCerts("certs-nocert", "alpha beta");
  Pair p = MakePair();
  p.alpha.tls = Tls(certs, certs, "alpha");
  auto a = StartOrDie(p.alpha);
  const std::string addr = "127.0.0.1:" + std::to_string(a->peer_port());
  v1::HelloRequest req;
  req.set_protocol_version(1);
  req.set_from_site("beta");
  req.set_to_site("alpha");
  v1::HelloResponse resp;

  grpc::SslCredentialsOptions no_cert;
  no_cert.pem_root_certs = ReadFile(certs + "/ca.pem");
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("alpha");
  auto tls_stub =
      v1::Peer::NewStub(grpc::CreateCustomChannel(addr, grpc::SslCredentials(no_cert), args));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 3s);
    CHECK_FALSE(tls_stub->Hello(&ctx, req, &resp).ok());
  }
  auto plain_stub =
      v1::Peer::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + 3s);
    CHECK_FALSE(plain_stub->Hello(&ctx, req, &resp).ok());
  }
}

}  // namespace
}  // namespace longhaul
