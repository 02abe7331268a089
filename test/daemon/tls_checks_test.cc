// CheckTlsMaterial (daemon/tls_checks.h): certificates from tools/make-certs.sh, and variants
// made with the openssl CLI in a temporary directory; each mistake fails with a message that
// names the key, the file as written in the config and what is wrong.
#include "daemon/tls_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <ctime>
#include <fstream>

#include "test/daemon/test_util.h"

namespace longhaul {
namespace {

using daemon::CheckTlsMaterial;
using daemon::TlsConfig;

void Run(const std::string& command) {
  std::string out;
  const int rc = testing::RunCommand(command, &out);
  INFO(command << "\n" << out);
  REQUIRE(rc == 0);
}

void Write(const std::string& path, const std::string& contents) {
  std::ofstream(path) << contents;
  ::chmod(path.c_str(), 0600);
}

// ROOT/certs: CA, alpha and beta from make-certs.sh, plus variants signed by that CA;
// ROOT/rogue: another CA (of the same name, as make-certs.sh makes them) and its alpha.
const std::string& Root() {
  static const std::string root = [] {
    const std::string dir = testing::TempDir("tls-checks");
    Run("tools/make-certs.sh " + dir + "/certs alpha beta");
    Run("tools/make-certs.sh " + dir + "/rogue alpha");
    return dir;
  }();
  return root;
}

// A new key and a certificate for it in ROOT/certs/NAME.{key,pem}, signed by that CA, with
// subject `subject`, the `ext` lines (openssl x509 -extfile) and `days` of validity.
void Sign(const std::string& name, const std::string& subject, const std::string& ext,
          int days = 30) {
  const std::string dir = Root() + "/certs/";
  Run("cd " + dir + " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes " +
      "-subj '" + subject + "' -keyout " + name + ".key -out " + name + ".csr 2>&1 && " +
      "printf '" + ext + "' >" + name + ".ext && " + "openssl x509 -req -in " + name +
      ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -days " + std::to_string(days) + " -extfile " +
      name + ".ext -out " + name + ".pem 2>&1 && chmod 600 " + name + ".key");
}

// TLS files named relative to Root(), as a config would write them.
TlsConfig Tls(const std::string& ca, const std::string& cert, const std::string& key) {
  TlsConfig tls;
  tls.ca_file = Root() + "/" + ca;
  tls.cert_file = Root() + "/" + cert;
  tls.key_file = Root() + "/" + key;
  tls.ca_as_written = ca;
  tls.cert_as_written = cert;
  tls.key_as_written = key;
  return tls;
}

TlsConfig Site(const std::string& site) {
  return Tls("certs/ca.pem", "certs/" + site + ".pem", "certs/" + site + ".key");
}

std::string Problem(const TlsConfig& tls, const std::string& site = "alpha",
                    std::time_t now = std::time(nullptr)) {
  const Status s = CheckTlsMaterial(tls, site, now);
  INFO("expected an error");
  REQUIRE_FALSE(s.ok());
  return std::string(s.message());
}

TEST_CASE("material from make-certs.sh passes") {
  CHECK(CheckTlsMaterial(Site("alpha"), "alpha").ok());
  CHECK(CheckTlsMaterial(Site("beta"), "beta").ok());
  // Paths built in code (no as-written names) are shown resolved.
  TlsConfig plain = Site("alpha");
  plain.key_as_written.clear();
  plain.key_file = Root() + "/certs/beta.key";
  CHECK_THAT(Problem(plain), Catch::StartsWith("tls.key '" + Root() + "/certs/beta.key'"));
}

TEST_CASE("a key that is not the certificate's fails, naming both files") {
  const std::string p = Problem(Tls("certs/ca.pem", "certs/alpha.pem", "certs/beta.key"));
  CHECK_THAT(
      p, Catch::StartsWith("tls.key 'certs/beta.key' does not match tls.cert 'certs/alpha.pem'"));
  CHECK_THAT(p, Catch::Contains("CN=alpha"));
}

TEST_CASE("another site's certificate fails, naming both sites") {
  CHECK(Problem(Site("beta"), "alpha") ==
        "tls.cert 'certs/beta.pem' names 'beta' (CN/SAN), this site is 'alpha': peers would "
        "refuse it (is it another site's certificate?)");
}

TEST_CASE("the name peers check: the SAN when there is one, else the CN") {
  // CN alpha but a SAN naming something else: gRPC's target name check never reads the CN.
  Sign("cn-only-matches", "/CN=alpha", "subjectAltName=DNS:alpha.example.com\\n");
  const std::string p = Problem(Site("cn-only-matches"));
  CHECK_THAT(p, Catch::Contains("names 'alpha.example.com' (SAN), 'alpha' (CN), this site is "
                                "'alpha': peers check the SAN DNS names"));
  // No SAN at all: the CN is the name.
  Sign("no-san", "/CN=alpha", "basicConstraints=CA:FALSE\\n");
  CHECK(CheckTlsMaterial(Site("no-san"), "alpha").ok());
  // One SAN among several.
  Sign("two-sans", "/CN=gateway", "subjectAltName=DNS:gateway,DNS:alpha\\n");
  CHECK(CheckTlsMaterial(Site("two-sans"), "alpha").ok());
  // Names are compared exactly, as the answering peer does.
  Sign("upper", "/CN=Alpha", "subjectAltName=DNS:Alpha\\n");
  CHECK_THAT(Problem(Site("upper")), Catch::Contains("names 'Alpha' (CN/SAN)"));
  Sign("nameless", "/O=longhaul", "basicConstraints=CA:FALSE\\n");
  CHECK_THAT(Problem(Site("nameless")),
             Catch::StartsWith("tls.cert 'certs/nameless.pem' names no site"));
}

TEST_CASE("a certificate from another CA fails, naming the CA file") {
  const std::string p = Problem(Tls("certs/ca.pem", "rogue/alpha.pem", "rogue/alpha.key"));
  CHECK_THAT(p, Catch::StartsWith(
                    "tls.cert 'rogue/alpha.pem' is not signed by tls.ca 'certs/ca.pem': it was "
                    "issued by 'CN=longhaul test CA'"));
  CHECK_THAT(p, Catch::Contains("a CA of that name but with another key"));
  // The rogue CA trusts its own certificate.
  CHECK(CheckTlsMaterial(Tls("rogue/ca.pem", "rogue/alpha.pem", "rogue/alpha.key"), "alpha").ok());
  // A self-signed certificate is signed by no CA.
  Run("cd " + Root() +
      "/certs && openssl req -x509 -newkey ec -pkeyopt "
      "ec_paramgen_curve:prime256v1 -nodes -days 30 -subj /CN=alpha -keyout self.key "
      "-out self.pem 2>&1 && chmod 600 self.key");
  CHECK_THAT(Problem(Site("self")),
             Catch::StartsWith("tls.cert 'certs/self.pem' is not signed by tls.ca"));
}

TEST_CASE("a certificate outside its validity dates fails, naming them") {
  // make-certs.sh certificates are valid for 3650 days from now.
  const std::time_t now = std::time(nullptr);
  const std::string late = Problem(Site("alpha"), "alpha", now + 3651L * 86400);
  CHECK_THAT(late, Catch::Matches("tls\\.cert 'certs/alpha\\.pem' expired on "
                                  "\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d UTC \\(valid from "
                                  ".* UTC to .* UTC\\)"));
  const std::string early = Problem(Site("alpha"), "alpha", now - 86400);
  CHECK_THAT(early, Catch::StartsWith("tls.cert 'certs/alpha.pem' is not valid until "));
  CHECK_THAT(early, Catch::Contains("clock"));
  // A certificate that expired yesterday, checked at the real time.
  Sign("expired", "/CN=alpha", "subjectAltName=DNS:alpha\\n", -1);
  CHECK_THAT(Problem(Site("expired")),
             Catch::StartsWith("tls.cert 'certs/expired.pem' expired on"));
}

TEST_CASE("an expired CA fails, naming the CA file") {
  const std::string dir = Root() + "/old-ca";
  Run("mkdir -p " + dir + " && cd " + dir +
      " && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
      "-subj '/CN=short-lived CA' -keyout ca.key -out ca.pem 2>&1");
  Run("tools/make-certs.sh " + dir + " alpha");  // reuses ca.pem; alpha valid 3650 days
  const std::string p = Problem(Tls("old-ca/ca.pem", "old-ca/alpha.pem", "old-ca/alpha.key"),
                                "alpha", std::time(nullptr) + 7 * 86400);
  CHECK_THAT(p, Catch::StartsWith("the CA certificate 'CN=short-lived CA' of tls.ca "
                                  "'old-ca/ca.pem' expired on "));
  CHECK_THAT(p, Catch::EndsWith("so no peer can verify tls.cert 'old-ca/alpha.pem'"));
}

TEST_CASE("a certificate that cannot serve both TLS roles fails") {
  Sign("server-only", "/CN=alpha", "subjectAltName=DNS:alpha\\nextendedKeyUsage=serverAuth\\n");
  CHECK_THAT(Problem(Site("server-only")),
             Catch::StartsWith("tls.cert 'certs/server-only.pem' may not serve TLS client "
                               "authentication"));
}

TEST_CASE("unreadable, empty, garbage and swapped files fail, each naming its file") {
  const std::string certs = Root() + "/certs/";
  Write(certs + "garbage.pem", "this is not a certificate\n");
  Write(certs + "empty.pem", "\n");
  Write(certs + "broken.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64 at all!\n-----END CERTIFICATE-----\n");
  Write(
      certs + "broken.key",
      "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49\n-----END PRIVATE KEY-----\n");

  const Status missing =
      CheckTlsMaterial(Tls("certs/nope.pem", "certs/alpha.pem", "certs/alpha.key"), "alpha");
  CHECK(missing.code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(missing.message()),
             Catch::StartsWith("cannot read tls.ca 'certs/nope.pem'"));

  CHECK(Problem(Tls("certs/garbage.pem", "certs/alpha.pem", "certs/alpha.key")) ==
        "tls.ca 'certs/garbage.pem' holds no PEM certificate (not PEM: expected '-----BEGIN "
        "CERTIFICATE-----')");
  CHECK(Problem(Tls("certs/ca.pem", "certs/empty.pem", "certs/alpha.key")) ==
        "tls.cert 'certs/empty.pem' is empty");
  CHECK_THAT(
      Problem(Tls("certs/ca.pem", "certs/broken.pem", "certs/alpha.key")),
      Catch::StartsWith("tls.cert 'certs/broken.pem' cannot be parsed as PEM certificates: "));
  CHECK_THAT(
      Problem(Tls("certs/ca.pem", "certs/alpha.pem", "certs/broken.key")),
      Catch::StartsWith("tls.key 'certs/broken.key' cannot be parsed as a PEM private key: "));
  CHECK_THAT(Problem(Tls("certs/ca.pem", "certs/alpha.key", "certs/alpha.pem")),
             Catch::EndsWith("(it holds a private key: are tls.cert and tls.key swapped?)"));
  CHECK(Problem(Tls("certs/ca.pem", "certs/alpha.pem", "certs/garbage.pem")) ==
        "tls.key 'certs/garbage.pem' holds no PEM private key (not PEM: expected '-----BEGIN "
        "PRIVATE KEY-----')");
  CHECK(Problem(Tls("certs/ca.pem", "certs/alpha.pem", "certs/ca.pem")) ==
        "tls.key 'certs/ca.pem' holds no PEM private key (it holds a certificate: are tls.cert "
        "and tls.key swapped?)");

  // A key with a passphrase: refused without prompting for it.
  Run("cd " + certs + " && openssl pkey -in alpha.key -aes256 -passout pass:secret " +
      "-out encrypted.key 2>&1 && chmod 600 encrypted.key");
  CHECK_THAT(Problem(Tls("certs/ca.pem", "certs/alpha.pem", "certs/encrypted.key")),
             Catch::StartsWith("tls.key 'certs/encrypted.key' is encrypted with a passphrase"));

  if (::geteuid() != 0) {  // root reads any file
    Write(certs + "locked.pem", "x");
    ::chmod((certs + "locked.pem").c_str(), 0);
    const Status locked =
        CheckTlsMaterial(Tls("certs/ca.pem", "certs/locked.pem", "certs/alpha.key"), "alpha");
    CHECK(locked.code() == absl::StatusCode::kPermissionDenied);
    CHECK_THAT(std::string(locked.message()),
               Catch::StartsWith("cannot read tls.cert 'certs/locked.pem'"));
  }
}

TEST_CASE("a CA bundle and a certificate file with an intermediate pass") {
  // A bundle: another CA first, then the one that signed alpha.
  Run("cd " + Root() + " && cat rogue/ca.pem certs/ca.pem >bundle.pem");
  CHECK(CheckTlsMaterial(Tls("bundle.pem", "certs/alpha.pem", "certs/alpha.key"), "alpha").ok());
  // An intermediate CA signed by the root; alpha's certificate file holds alpha's certificate
  // and then the intermediate's.
  const std::string dir = Root() + "/inter";
  Run("mkdir -p " + dir + " && cd " + dir +
      " && openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
      "-subj '/CN=intermediate' -keyout ca.key -out ca.csr 2>&1 && "
      "printf 'basicConstraints=critical,CA:TRUE\\nkeyUsage=keyCertSign,cRLSign\\n' >ca.ext && "
      "openssl x509 -req -in ca.csr -CA ../certs/ca.pem -CAkey ../certs/ca.key -CAcreateserial "
      "-days 30 -extfile ca.ext -out ca.pem 2>&1");
  Run("tools/make-certs.sh " + dir + " alpha && cat " + dir + "/ca.pem >>" + dir + "/alpha.pem");
  CHECK(CheckTlsMaterial(Tls("certs/ca.pem", "inter/alpha.pem", "inter/alpha.key"), "alpha").ok());
  // Without the intermediate in the file, the root alone cannot verify it.
  Run("cd " + dir + " && openssl x509 -in alpha.pem -out leaf.pem 2>&1");
  CHECK_THAT(Problem(Tls("certs/ca.pem", "inter/leaf.pem", "inter/alpha.key")),
             Catch::StartsWith("tls.cert 'inter/leaf.pem' is not signed by tls.ca 'certs/ca.pem': "
                               "it was issued by 'CN=intermediate'"));
}

}  // namespace
}  // namespace longhaul
