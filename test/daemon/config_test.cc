// Tests of the site config loader (daemon/config.h): valid configs parse to the expected
// values with paths resolved, and each kind of malformed config is rejected with an error
// that names the exact file:line:column and key path.
#include "daemon/config.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/names.h"

namespace longhaul::daemon {
namespace {

namespace fs = std::filesystem;

// Written private (0600): tokens and keys must be, and a test file may serve as either.
void WriteFile(const fs::path& path, const std::string& contents,
               fs::perms perms = fs::perms::owner_read | fs::perms::owner_write) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << contents;
  fs::permissions(path, perms);
}

// $TEST_TMPDIR/config_test/site, holding a token, an empty token and TLS files.
const std::string& SiteDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TEST_TMPDIR");
    fs::path site = fs::path(tmp != nullptr ? tmp : fs::temp_directory_path().string()) /
                    "config_test" / "site";
    WriteFile(site / "token", "  s3cret-token-0123456789\n");
    WriteFile(site / "empty_token", " \n");
    WriteFile(site / "certs/ca.pem", "ca");
    WriteFile(site / "certs/alpha.pem", "cert");
    WriteFile(site / "certs/alpha.key", "key");
    return site.string();
  }();
  return dir;
}

StatusOr<SiteConfig> Parse(const std::string& yaml) {
  return ParseSiteConfig(yaml, "alpha.yaml", SiteDir());
}

// Lines 1-4 of a minimal valid config; cases replace or append lines.
const std::string kSite = "site: alpha\n";
const std::string kListen =
    "listen: {peer: '127.0.0.1:7101', control: '127.0.0.1:7102', status: '127.0.0.1:7103'}\n";
const std::string kRest = "data_dir: data\nauth: {token_file: token}\n";
const std::string kMinimal = kSite + kListen + kRest;

std::string Listen(const std::string& peer, const std::string& control) {
  return "listen: {peer: '" + peer + "', control: '" + control + "', status: '127.0.0.1:7103'}\n";
}
std::string Peers(const std::string& items) { return kMinimal + "peers:\n" + items; }

struct BadCase {
  std::string yaml;
  std::string path;     // the key path in the message
  std::string problem;  // a substring of the problem
  int line;
  int column;
};

TEST_CASE("malformed configs name file, line, column and key path") {
  const BadCase cases[] = {
      {"site: alpha\nlisten: [1, 2\n", "(root)", "invalid YAML", 3, 1},
      {"a: 1\n---\nb: 2\n", "(root)", "expected one YAML document, found 2", 2, 1},
      {"", "(root)", "the config is empty", 1, 1},
      // yaml-cpp's LoadAll yields empty documents for this without end.
      {",", "(root)", "expected one YAML document, found 16 or more", 1, 1},
      {kMinimal + "# " + std::string(300 << 10, 'x'), "(root)", "more than the limit of 262144", 1,
       1},
      {"- site\n- alpha\n", "(root)", "expected a map, got a list", 1, 1},
      {kMinimal + "sitee: x\n", "sitee", "unknown key 'sitee' (did you mean 'site'?)", 5, 1},
      {kMinimal + "site: beta\n", "site", "duplicate key", 5, 1},
      {kMinimal + "links:\n  heartbeat_interval: 2\n", "links.heartbeat_interval",
       "unknown key 'heartbeat_interval' (did you mean 'heartbeat_interval_seconds'?)", 6, 3},
      {kListen + kRest, "site", "missing required key", 1, 1},
      {"site:\n" + kListen + kRest, "site", "expected a string, got nothing", 1, 1},
      {"site: Alpha\n" + kListen + kRest, "site", "invalid name 'Alpha'", 1, 7},
      {kSite + "listen:\n  peer: '127.0.0.1:7101'\n  control: '127.0.0.1:7102'\n" + kRest,
       "listen.status", "missing required key", 3, 3},
      {kSite + Listen("127.0.0.1:http", "127.0.0.1:7102") + kRest, "listen.peer",
       "port 'http' is not a number", 2, 16},
      {kSite + Listen("127.0.0.1:7101", "127.0.0.1:7101") + kRest, "listen.control",
       "same address as listen.peer", 2, 43},
      {kSite + Listen("0.0.0.0:7101", "[::1]:7101") + kRest, "listen.control",
       "same address as listen.peer", 2, 41},
      {kSite + kListen + "auth: {token_file: token}\n", "data_dir", "missing required key", 1, 1},
      {kSite + kListen + "data_dir: data\nauth: {}\n", "auth.token_file", "missing required key", 4,
       7},
      {kSite + kListen + "data_dir: data\nauth: {token_file: nope}\n", "auth.token_file",
       "cannot read token file", 4, 20},
      {kSite + kListen + "data_dir: data\nauth: {token_file: empty_token}\n", "auth.token_file",
       "is empty", 4, 20},
      {kMinimal + "peers: beta\n", "peers", "expected a list, got 'beta'", 5, 8},
      {kMinimal + "peers: [beta]\n", "peers[0]", "expected a map, got 'beta'", 5, 9},
      {Peers("  - {name: beta, address: 'beta.example:70000'}\n"), "peers[0].address",
       "port 70000 is out of range 1..65535", 6, 27},
      {Peers("  - {name: beta, address: 'beta.example:0'}\n"), "peers[0].address",
       "port 0 is out of range 1..65535", 6, 27},
      {Peers("  - {name: beta, address: '::1:7201'}\n"), "peers[0].address",
       "put IPv6 addresses in brackets", 6, 27},
      {Peers("  - {name: beta, address: '256.1.1.1:7201'}\n"), "peers[0].address",
       "invalid IPv4 address '256.1.1.1'", 6, 27},
      {Peers("  - {name: beta, address: 'bad_host!:7201'}\n"), "peers[0].address",
       "invalid host name 'bad_host!'", 6, 27},
      {Peers("  - {name: beta, address: '0.0.0.0:7201'}\n"), "peers[0].address",
       "cannot dial a wildcard address", 6, 27},
      {Peers("  - {name: beta}\n"), "peers[0].address", "missing required key", 6, 5},
      {Peers("  - {name: Beta_1, address: 'h:1'}\n"), "peers[0].name", "invalid name 'Beta_1'", 6,
       12},
      {Peers("  - {name: alpha, address: 'h:1'}\n"), "peers[0].name", "'alpha' is this site's name",
       6, 12},
      {Peers("  - {name: beta, address: 'h:1'}\n  - {name: beta, address: 'h:2'}\n"),
       "peers[1].name", "duplicate peer name 'beta' (also peers[0])", 7, 12},
      {Peers("  - {name: beta, address: 'h:1'}\n  - {name: gamma, address: 'H:1'}\n"),
       "peers[1].address", "duplicate address 'H:1' (also peers[0])", 7, 28},
      {Peers("  - {name: beta, address: '127.0.0.1:7102'}\n"), "peers[0].address",
       "this site's own listen address", 6, 27},
      {kMinimal + "devices: [cpu, gpu0]\n", "devices[1]", "invalid device 'gpu0'", 5, 16},
      {kMinimal + "devices: [cuda:0, cuda:01]\n", "devices[1]", "invalid device 'cuda:01'", 5, 19},
      {kMinimal + "devices: [cuda:0, cuda:0]\n", "devices[1]", "duplicate device 'cuda:0'", 5, 19},
      {kMinimal + "devices: cpu\n", "devices", "expected a list, got 'cpu'", 5, 10},
      {kMinimal + "devices: []\n", "devices", "must list at least one device", 5, 10},
      {kMinimal + "tls: {ca: certs/ca.pem, cert: certs/alpha.pem}\n", "tls.key",
       "missing required key", 5, 6},
      {kMinimal + "tls: {ca: certs/nope.pem, cert: certs/alpha.pem, key: certs/alpha.key}\n",
       "tls.ca", "certs/nope.pem' does not exist", 5, 11},
      {kMinimal + "tls:\n", "tls", "expected a map, got nothing", 5, 1},
      {kMinimal + "log_level: loud\n", "log_level", "invalid log level 'loud'", 5, 12},
      {kMinimal + "links: {heartbeat_interval_seconds: 0}\n", "links.heartbeat_interval_seconds",
       "must be > 0 and <= 3600 seconds, got 0", 5, 37},
      {kMinimal + "links: {probe_interval_seconds: 1e6}\n", "links.probe_interval_seconds",
       "must be > 0 and <= 86400 seconds", 5, 33},
      {kMinimal + "links: {gossip_refresh_seconds: 0}\n", "links.gossip_refresh_seconds",
       "must be > 0 and <= 86400 seconds, got 0", 5, 33},
      {kMinimal + "links: {heartbeat_interval_seconds: [1]}\n", "links.heartbeat_interval_seconds",
       "expected a number, got a list", 5, 37},
      {kMinimal + "links: {reconnect_initial_seconds: fast}\n", "links.reconnect_initial_seconds",
       "expected a number, got 'fast'", 5, 36},
      {kMinimal + "links: {probe_bytes: 1024}\n", "links.probe_bytes",
       "must be between 65536 (64 KiB) and 1073741824 (1 GiB), got 1024", 5, 22},
      {kMinimal + "links: {probe_bytes: 65536.5}\n", "links.probe_bytes", "expected a whole number",
       5, 22},
      {kMinimal + "links:\n  reconnect_initial_seconds: 5\n  reconnect_max_seconds: 2\n",
       "links.reconnect_max_seconds", "must be >= reconnect_initial_seconds (5)", 7, 26},
      {kMinimal + "links:\n  reconnect_initial_seconds: 30\n", "links.reconnect_initial_seconds",
       "reconnect_max_seconds (10) must be >= reconnect_initial_seconds (30)", 6, 30},
  };
  for (const BadCase& c : cases) {
    CAPTURE(c.yaml);
    StatusOr<SiteConfig> config = Parse(c.yaml);
    REQUIRE_FALSE(config.ok());
    std::string message(config.status().message());
    CAPTURE(message);
    CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    std::string prefix = "alpha.yaml:" + std::to_string(c.line) + ":" + std::to_string(c.column) +
                         ": " + c.path + ": ";
    CHECK(message.rfind(prefix, 0) == 0);
    CHECK(message.find(c.problem, prefix.size()) != std::string::npos);
  }
}

TEST_CASE("a minimal config gets the defaults") {
  StatusOr<SiteConfig> config = Parse(kMinimal);
  REQUIRE(config.ok());
  CHECK(config->source == "alpha.yaml");
  CHECK(config->site == "alpha");
  CHECK(config->peer_listen == "127.0.0.1:7101");
  CHECK(config->control_listen == "127.0.0.1:7102");
  CHECK(config->status_listen == "127.0.0.1:7103");
  CHECK(config->peers.empty());
  CHECK(config->data_dir == (fs::path(SiteDir()) / "data").string());
  CHECK(config->devices == std::vector<std::string>{"cpu"});
  CHECK_FALSE(config->tls.has_value());
  CHECK(config->token_file == (fs::path(SiteDir()) / "token").string());
  CHECK(config->log_level == "info");
  CHECK(config->links.heartbeat_interval_seconds == 1.0);
  CHECK(config->links.probe_interval_seconds == 10.0);
  CHECK(config->links.probe_bytes == 4u << 20);
  CHECK(config->links.reconnect_initial_seconds == 0.2);
  CHECK(config->links.reconnect_max_seconds == 10.0);
  CHECK(config->links.GossipRefreshSeconds() == 20.0);  // two probe intervals
}

TEST_CASE("a full config with tls, peers and links") {
  const std::string yaml = R"(# site alpha
site: alpha
listen:
  peer: 0.0.0.0:7101
  control: 127.0.0.1:7102
  status: '[::]:7103'
peers:
  - name: beta
    address: beta.dc2.example.com:7201
  - name: gamma-2
    address: '[2001:db8::7]:7301'
  - name: delta
    address: 10.0.0.4:7401
data_dir: /var/lib/longhaul
devices: [cuda:0, cuda:1]
tls:
  ca: certs/ca.pem
  cert: certs/alpha.pem
  key: certs/alpha.key
auth:
  token_file: token
log_level: debug
links:
  heartbeat_interval_seconds: 0.5
  probe_interval_seconds: 30
  probe_bytes: 1048576
  reconnect_initial_seconds: 1
  reconnect_max_seconds: 60
  gossip_refresh_seconds: 5
)";
  StatusOr<SiteConfig> config = Parse(yaml);
  REQUIRE(config.ok());
  CHECK(config->peer_listen == "0.0.0.0:7101");
  CHECK(config->status_listen == "[::]:7103");
  REQUIRE(config->peers.size() == 3);
  CHECK(config->peers[0].name == "beta");
  CHECK(config->peers[0].address == "beta.dc2.example.com:7201");
  CHECK(config->peers[1].name == "gamma-2");
  CHECK(config->peers[1].address == "[2001:db8::7]:7301");
  CHECK(config->peers[2].address == "10.0.0.4:7401");
  CHECK(config->data_dir == "/var/lib/longhaul");
  CHECK(config->devices == std::vector<std::string>{"cuda:0", "cuda:1"});
  REQUIRE(config->tls.has_value());
  CHECK(config->tls->ca_file == (fs::path(SiteDir()) / "certs/ca.pem").string());
  CHECK(config->tls->cert_file == (fs::path(SiteDir()) / "certs/alpha.pem").string());
  CHECK(config->tls->key_file == (fs::path(SiteDir()) / "certs/alpha.key").string());
  // As written, for messages about the files (daemon/tls_checks.h).
  CHECK(config->tls->ca_as_written == "certs/ca.pem");
  CHECK(config->tls->cert_as_written == "certs/alpha.pem");
  CHECK(config->tls->key_as_written == "certs/alpha.key");
  CHECK(config->log_level == "debug");
  CHECK(config->links.heartbeat_interval_seconds == 0.5);
  CHECK(config->links.probe_interval_seconds == 30.0);
  CHECK(config->links.probe_bytes == 1048576u);
  CHECK(config->links.reconnect_initial_seconds == 1.0);
  CHECK(config->links.reconnect_max_seconds == 60.0);
  CHECK(config->links.GossipRefreshSeconds() == 5.0);
}

TEST_CASE("listen addresses may all use port 0") {
  std::string yaml = kSite + Listen("127.0.0.1:0", "127.0.0.1:0") + kRest + "peers:\n";
  StatusOr<SiteConfig> config = Parse(yaml);
  REQUIRE(config.ok());
  CHECK(config->control_listen == "127.0.0.1:0");
  CHECK(config->peers.empty());
}

TEST_CASE("LoadSiteConfig resolves paths against the config file's directory") {
  fs::path dir = fs::path(SiteDir()).parent_path() / "load";
  // data_dir with "..", a trailing '/', and files in other directories.
  WriteFile(dir / "conf/alpha.yaml", kSite + kListen +
                                         "data_dir: ../data/alpha/\n"
                                         "auth: {token_file: ../site/token}\n"
                                         "tls: {ca: ca.pem, cert: ca.pem, key: ca.pem}\n");
  WriteFile(dir / "conf/ca.pem", "ca");
  WriteFile(dir / "site/token", "t-0123456789abcdef\n");
  std::string path = (dir / "conf/alpha.yaml").string();
  StatusOr<SiteConfig> config = LoadSiteConfig(path);
  REQUIRE(config.ok());
  CHECK(config->source == path);
  CHECK(config->data_dir == (dir / "data/alpha").string());
  CHECK(config->token_file == (dir / "site/token").string());
  CHECK(config->tls->ca_file == (dir / "conf/ca.pem").string());

  // Errors name the file as given.
  WriteFile(dir / "conf/token", "t-0123456789abcdef\n");
  WriteFile(dir / "conf/bad.yaml", kMinimal + "log_level: loud\n");
  StatusOr<SiteConfig> bad = LoadSiteConfig((dir / "conf/bad.yaml").string());
  REQUIRE_FALSE(bad.ok());
  CHECK(std::string(bad.status().message()).rfind((dir / "conf/bad.yaml:5:12: ").string(), 0) == 0);
}

TEST_CASE("LoadSiteConfig on a missing file names it") {
  std::string path = SiteDir() + "/no-such.yaml";
  StatusOr<SiteConfig> config = LoadSiteConfig(path);
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(config.status().message()).find(path) != std::string::npos);
}

TEST_CASE("ReadTokenFile trims whitespace and rejects empty or binary tokens") {
  StatusOr<std::string> token = ReadTokenFile(SiteDir() + "/token");
  REQUIRE(token.ok());
  CHECK(*token == "s3cret-token-0123456789");

  StatusOr<std::string> empty = ReadTokenFile(SiteDir() + "/empty_token");
  REQUIRE_FALSE(empty.ok());
  CHECK(empty.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(empty.status().message()).find("is empty") != std::string::npos);

  WriteFile(fs::path(SiteDir()) / "two_lines", "abc\ndef\n");
  CHECK_FALSE(ReadTokenFile(SiteDir() + "/two_lines").ok());

  StatusOr<std::string> missing = ReadTokenFile(SiteDir() + "/nope");
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("token and key files must be private, and tokens at least 16 bytes") {
  const fs::path dir = fs::path(SiteDir()).parent_path() / "secrets";
  WriteFile(dir / "short", "abc123\n");
  StatusOr<std::string> short_token = ReadTokenFile((dir / "short").string());
  REQUIRE_FALSE(short_token.ok());
  CHECK_THAT(std::string(short_token.status().message()), Catch::Contains("6-byte token"));

  WriteFile(dir / "shared", "0123456789abcdef0123\n",
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                fs::perms::others_read);
  StatusOr<std::string> shared = ReadTokenFile((dir / "shared").string());
  REQUIRE_FALSE(shared.ok());
  CHECK(shared.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK_THAT(std::string(shared.status().message()), Catch::Contains("mode 644"));
  CHECK_THAT(std::string(shared.status().message()), Catch::Contains("chmod 600"));

  WriteFile(dir / "big", std::string(5000, 'a'));
  CHECK_FALSE(ReadTokenFile((dir / "big").string()).ok());

  // A TLS key others can read is refused where the config names it.
  WriteFile(fs::path(SiteDir()) / "certs/open.key", "key",
            fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);
  StatusOr<SiteConfig> config =
      Parse(kMinimal + "tls: {ca: certs/ca.pem, cert: certs/alpha.pem, key: certs/open.key}\n");
  REQUIRE_FALSE(config.ok());
  CHECK_THAT(std::string(config.status().message()), Catch::Contains("alpha.yaml:5:"));
  CHECK_THAT(std::string(config.status().message()), Catch::Contains("tls.key: private key"));
}

TEST_CASE("plaintext listeners off loopback need insecure: true") {
  const std::string open_peer =
      "listen: {peer: '0.0.0.0:7101', control: '127.0.0.1:7102', status: '0.0.0.0:7103'}\n";
  StatusOr<SiteConfig> refused = Parse(kSite + open_peer + kRest);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("listen.peer"));
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("insecure: true"));

  const std::string open_control =
      "listen: {peer: '127.0.0.1:7101', control: '10.1.2.3:7102', status: '127.0.0.1:7103'}\n";
  StatusOr<SiteConfig> control = Parse(kSite + open_control + kRest);
  REQUIRE_FALSE(control.ok());
  CHECK_THAT(std::string(control.status().message()), Catch::Contains("listen.control"));

  StatusOr<SiteConfig> allowed = Parse(kSite + open_peer + kRest + "insecure: true\n");
  REQUIRE(allowed.ok());
  CHECK(allowed->insecure);
  // The status listener serves no secrets and may listen anywhere; so may [::1].
  const std::string v6 =
      "listen: {peer: '[::1]:7101', control: 'localhost:7102', status: "
      "'0.0.0.0:7103'}\n";
  CHECK(Parse(kSite + v6 + kRest).ok());
  StatusOr<SiteConfig> bad = Parse(kSite + open_peer + kRest + "insecure: yes please\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("insecure"));
}

TEST_CASE("a control listener off loopback needs tls.control, not just tls:") {
  const std::string open =
      "listen: {peer: '0.0.0.0:7101', control: '0.0.0.0:7102', status: '0.0.0.0:7103'}\n";
  const std::string tls = "tls: {ca: certs/ca.pem, cert: certs/alpha.pem, key: certs/alpha.key";
  // Mutual TLS for peers covers the peer listener; the control token would still be plaintext.
  StatusOr<SiteConfig> peer_only = Parse(kSite + open + kRest + tls + "}\n");
  REQUIRE_FALSE(peer_only.ok());
  CHECK_THAT(std::string(peer_only.status().message()), Catch::Contains("listen.control"));
  CHECK_THAT(std::string(peer_only.status().message()), Catch::Contains("tls: {control: true}"));

  StatusOr<SiteConfig> both = Parse(kSite + open + kRest + tls + ", control: true}\n");
  INFO(both.status().ToString());
  REQUIRE(both.ok());
  REQUIRE(both->tls);
  CHECK(both->tls->control);
  StatusOr<SiteConfig> off = Parse(kMinimal + tls + ", control: false}\n");
  REQUIRE(off.ok());
  CHECK_FALSE(off->tls->control);

  StatusOr<SiteConfig> bad = Parse(kSite + open + kRest + tls + ", control: maybe}\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("tls.control"));
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("'maybe'"));
}

TEST_CASE("data_roots default to data_dir and resolve like it") {
  StatusOr<SiteConfig> config = Parse(kMinimal);
  REQUIRE(config.ok());
  CHECK(config->data_roots == std::vector<std::string>{config->data_dir});
  config = Parse(kMinimal + "data_roots: [/srv/corpora, shards/]\n");
  REQUIRE(config.ok());
  CHECK(config->data_roots ==
        std::vector<std::string>{"/srv/corpora", (fs::path(SiteDir()) / "shards").string()});
  StatusOr<SiteConfig> bad = Parse(kMinimal + "data_roots: ['']\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("data_roots[0]"));
}

TEST_CASE("volunteer: the jobs a site asks to join, each at a peer that coordinates it") {
  const std::string peers = Peers("  - {name: beta, address: '127.0.0.1:7201'}\n");
  StatusOr<SiteConfig> config = Parse(peers);
  REQUIRE(config.ok());
  CHECK(config->volunteer.empty());
  config = Parse(peers +
                 "volunteer:\n  - {job: tiny, coordinator: beta}\n"
                 "  - {job: big-1a2b.3, coordinator: beta}\n");
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  REQUIRE(config->volunteer.size() == 2);
  CHECK(config->volunteer[0].job == "tiny");
  CHECK(config->volunteer[0].coordinator == "beta");
  CHECK(config->volunteer[1].job == "big-1a2b.3");
  auto error = [&](const std::string& list) {
    StatusOr<SiteConfig> bad = Parse(peers + "volunteer:\n" + list);
    return bad.ok() ? std::string("(parsed)") : std::string(bad.status().message());
  };
  CHECK_THAT(error("  - {job: tiny, coordinator: gamma}\n"),
             Catch::Contains("alpha.yaml:8:") &&
                 Catch::Contains("volunteer[0].coordinator: 'gamma' is not one of this site's "
                                 "peers"));
  CHECK_THAT(error("  - {job: tiny, coordinator: beta}\n  - {job: tiny, coordinator: beta}\n"),
             Catch::Contains("volunteer[1].job: job 'tiny' is listed twice"));
  CHECK_THAT(error("  - {job: ../etc, coordinator: beta}\n"),
             Catch::Contains("volunteer[0].job: invalid job '../etc'"));
  CHECK_THAT(error("  - {coordinator: beta}\n"), Catch::Contains("missing required key"));
  CHECK_THAT(error("  - {job: tiny, coordinator: beta, site: x}\n"),
             Catch::Contains("unknown key 'site'"));
}

}  // namespace
}  // namespace longhaul::daemon

TEST_CASE("the site-name and job-id rules, at their edges", "[config]") {
  using longhaul::IsJobId;
  using longhaul::IsSiteName;
  CHECK(IsSiteName("a"));
  CHECK(IsSiteName("eu-west-2"));
  CHECK(IsSiteName(std::string(63, 'a')));
  CHECK_FALSE(IsSiteName(std::string(64, 'a')));
  CHECK_FALSE(IsSiteName(""));
  CHECK_FALSE(IsSiteName("-alpha"));
  CHECK_FALSE(IsSiteName("Alpha"));
  CHECK_FALSE(IsSiteName("al_pha"));
  CHECK_FALSE(IsSiteName("al.pha"));
  CHECK_FALSE(IsSiteName(std::string("al\0pha", 6)));
  CHECK(IsJobId("job-1.A_b"));
  CHECK(IsJobId("7"));
  CHECK(IsJobId(std::string(128, 'j')));
  CHECK_FALSE(IsJobId(std::string(129, 'j')));
  CHECK_FALSE(IsJobId(""));
  CHECK_FALSE(IsJobId(".hidden"));
  CHECK_FALSE(IsJobId("-x"));
  CHECK_FALSE(IsJobId("_x"));
  CHECK_FALSE(IsJobId("../etc"));
  CHECK_FALSE(IsJobId("a/b"));
  CHECK_FALSE(IsJobId("a b"));
}
