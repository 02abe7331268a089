// The site's TLS material checked with OpenSSL before anything listens (tls_checks.h).
#include "daemon/tls_checks.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/config_checks.h"

namespace longhaul::daemon {
namespace {

template <typename T, void (*Free)(T*)>
struct Deleter {
  void operator()(T* p) const { Free(p); }
};
using Bio = std::unique_ptr<BIO, Deleter<BIO, BIO_free_all>>;
using Cert = std::unique_ptr<X509, Deleter<X509, X509_free>>;
using Key = std::unique_ptr<EVP_PKEY, Deleter<EVP_PKEY, EVP_PKEY_free>>;
using Store = std::unique_ptr<X509_STORE, Deleter<X509_STORE, X509_STORE_free>>;
using StoreCtx = std::unique_ptr<X509_STORE_CTX, Deleter<X509_STORE_CTX, X509_STORE_CTX_free>>;
using Names = std::unique_ptr<GENERAL_NAMES, Deleter<GENERAL_NAMES, GENERAL_NAMES_free>>;

// One of the three files: its key in the config ("tls.key") and its path as written there.
struct File {
  std::string key;
  std::string shown;  // as written in the config, else the resolved path
  std::string path;   // resolved
  std::string Name() const { return absl::StrCat(key, " '", shown, "'"); }
};

File MakeFile(absl::string_view key, const std::string& as_written, const std::string& path) {
  return {std::string(key), as_written.empty() ? path : as_written, path};
}

// Never asks for a passphrase (OpenSSL's default would prompt on the terminal).
int NoPassphrase(char*, int, int, void*) { return -1; }

StatusOr<std::string> ReadAll(const File& f) {
  auto contents = config_internal::ReadFileBounded(f.path, f.Name(), 1u << 20);
  if (!contents.ok() && absl::IsInvalidArgument(contents.status())) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.Name(), " is larger than 1 MiB; expected PEM text"));
  }
  if (!contents.ok()) return contents.status();
  if (contents->find_first_not_of(" \t\r\n") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(f.Name(), " is empty"));
  }
  return contents;
}

// Empties OpenSSL's error queue (shared with gRPC on this thread) and returns the reason of
// its first error other than "no start line" (the end of a PEM file), or "" if none.
std::string TakeOpenSslError() {
  std::string reason;
  while (unsigned long e = ERR_get_error()) {
    if (!reason.empty()) continue;
    if (ERR_GET_LIB(e) == ERR_LIB_PEM && ERR_GET_REASON(e) == PEM_R_NO_START_LINE) continue;
    const char* text = ERR_reason_error_string(e);
    reason = text != nullptr ? text : absl::StrCat("OpenSSL error ", e);
  }
  return reason;
}

Bio MemoryBio(const std::string& text) {
  return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// A hint for a file that holds PEM blocks of another kind than the one expected.
std::string KindHint(const std::string& text, bool want_key) {
  if (!absl::StrContains(text, "-----BEGIN ")) {
    return want_key ? " (not PEM: expected '-----BEGIN PRIVATE KEY-----')"
                    : " (not PEM: expected '-----BEGIN CERTIFICATE-----')";
  }
  if (!want_key && absl::StrContains(text, "PRIVATE KEY-----")) {
    return " (it holds a private key: are tls.cert and tls.key swapped?)";
  }
  if (want_key && absl::StrContains(text, "CERTIFICATE-----")) {
    return " (it holds a certificate: are tls.cert and tls.key swapped?)";
  }
  return "";
}

// Every certificate of PEM file `f`, in order; at least one.
StatusOr<std::vector<Cert>> ReadCerts(const File& f) {
  ASSIGN_OR_RETURN(std::string text, ReadAll(f));
  ERR_clear_error();
  Bio bio = MemoryBio(text);
  std::vector<Cert> certs;
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    certs.emplace_back(x);
  }
  const std::string error = TakeOpenSslError();
  if (!error.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.Name(), " cannot be parsed as PEM certificates: ", error,
        certs.empty() ? "" : absl::StrCat(" (after ", certs.size(), " good certificate(s))")));
  }
  if (certs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.Name(), " holds no PEM certificate", KindHint(text, false)));
  }
  return certs;
}

StatusOr<Key> ReadKey(const File& f) {
  ASSIGN_OR_RETURN(std::string text, ReadAll(f));
  if (absl::StrContains(text, "ENCRYPTED")) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.Name(),
                     " is encrypted with a passphrase, which longhauld cannot supply; decrypt it "
                     "(openssl pkey -in KEY -out PLAIN.key) and keep it chmod 600"));
  }
  ERR_clear_error();
  Bio bio = MemoryBio(text);
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  const std::string error = TakeOpenSslError();
  if (key) return key;
  if (error.empty() || !absl::StrContains(text, "PRIVATE KEY-----")) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.Name(), " holds no PEM private key", KindHint(text, true)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(f.Name(), " cannot be parsed as a PEM private key: ", error,
                   " (a damaged file, or a kind of key OpenSSL cannot read)"));
}

std::string AsString(const ASN1_STRING* s) {
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

// "CN=alpha,O=example" (RFC 2253).
std::string NameText(const X509_NAME* name) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || X509_NAME_print_ex(bio.get(), name, 0, XN_FLAG_RFC2253) < 0) return "?";
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, size > 0 ? static_cast<size_t>(size) : 0);
}

std::string Subject(const X509* cert) { return NameText(X509_get_subject_name(cert)); }
std::string Issuer(const X509* cert) { return NameText(X509_get_issuer_name(cert)); }

std::string Date(const ASN1_TIME* t) {
  struct tm tm {};
  if (ASN1_TIME_to_tm(t, &tm) != 1) return "(an unreadable date)";
  char buf[64];
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string Validity(const X509* cert) {
  return absl::StrCat("valid from ", Date(X509_get0_notBefore(cert)), " to ",
                      Date(X509_get0_notAfter(cert)));
}

// What `cert` says about its dates at `now`: "" when within them.
std::string DateProblem(const X509* cert, std::time_t now) {
  if (X509_cmp_time(X509_get0_notBefore(cert), &now) > 0) {
    return absl::StrCat("is not valid until ", Date(X509_get0_notBefore(cert)), " (",
                        Validity(cert), "; is this machine's clock right?)");
  }
  if (X509_cmp_time(X509_get0_notAfter(cert), &now) < 0) {
    return absl::StrCat("expired on ", Date(X509_get0_notAfter(cert)), " (", Validity(cert), ")");
  }
  return "";
}

// The names of `cert` that a peer dialling the site compares with the site name (gRPC's rule,
// tsi_ssl_peer_matches_name): its SAN entries when it has any, else its CNs.
struct CertNames {
  std::vector<std::string> san_dns;
  int san_other = 0;  // IP, URI, email SAN entries: they make gRPC skip the CN too
  std::vector<std::string> cn;
};

CertNames NamesOf(X509* cert) {
  CertNames names;
  Names sans(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans.get()); ++i) {
    const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans.get(), i);
    if (g->type == GEN_DNS) {
      names.san_dns.push_back(AsString(g->d.dNSName));
    } else if (g->type == GEN_IPADD || g->type == GEN_URI || g->type == GEN_EMAIL) {
      ++names.san_other;
    }
  }
  const X509_NAME* subject = X509_get_subject_name(cert);
  for (int i = -1; (i = X509_NAME_get_index_by_NID(subject, NID_commonName, i)) >= 0;) {
    names.cn.push_back(AsString(X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, i))));
  }
  return names;
}

bool Has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Status CheckNames(X509* leaf, const File& cert, const std::string& site) {
  const CertNames n = NamesOf(leaf);
  const bool has_san = !n.san_dns.empty() || n.san_other > 0;
  if (has_san ? Has(n.san_dns, site) : Has(n.cn, site)) return absl::OkStatus();
  // "'beta' (CN/SAN)": each name once, with where it appears.
  std::vector<std::string> shown;
  std::vector<std::string> seen;
  for (const auto* list : {&n.san_dns, &n.cn}) {
    for (const std::string& name : *list) {
      if (Has(seen, name)) continue;
      seen.push_back(name);
      const bool in_san = Has(n.san_dns, name), in_cn = Has(n.cn, name);
      shown.push_back(absl::StrCat("'", name, "' (",
                                   in_san && in_cn ? "CN/SAN"
                                   : in_san        ? "SAN"
                                                   : "CN",
                                   ")"));
    }
  }
  std::string problem = shown.empty()
                            ? absl::StrCat(cert.Name(), " names no site (no SAN DNS name, no CN)")
                            : absl::StrCat(cert.Name(), " names ", absl::StrJoin(shown, ", "));
  absl::StrAppend(&problem, ", this site is '", site, "'");
  if (has_san && Has(n.cn, site)) {
    absl::StrAppend(&problem,
                    ": peers check the SAN DNS names of a certificate that has any, not its CN");
  } else {
    absl::StrAppend(&problem, ": peers would refuse it (is it another site's certificate?)");
  }
  return absl::InvalidArgumentError(problem);
}

bool IsNotSignedError(int error) {
  switch (error) {
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_CERT_SIGNATURE_FAILURE:
      return true;
    default:
      return false;
  }
}

// tls.cert's certificate chains, through its intermediates, to a certificate of tls.ca, with
// gRPC's verification flags.
Status CheckChain(const std::vector<Cert>& chain, const std::vector<Cert>& cas, const File& cert,
                  const File& ca, std::time_t now) {
  Store store(X509_STORE_new());
  StoreCtx ctx(X509_STORE_CTX_new());
  if (!store || !ctx) return absl::ResourceExhaustedError("OpenSSL: out of memory");
  for (const Cert& c : cas) X509_STORE_add_cert(store.get(), c.get());
  X509_STORE_set_flags(store.get(), X509_V_FLAG_PARTIAL_CHAIN | X509_V_FLAG_TRUSTED_FIRST);
  STACK_OF(X509)* untrusted = sk_X509_new_null();
  for (size_t i = 1; i < chain.size(); ++i) sk_X509_push(untrusted, chain[i].get());
  int ok = X509_STORE_CTX_init(ctx.get(), store.get(), chain[0].get(), untrusted);
  if (ok == 1) {
    X509_STORE_CTX_set_time(ctx.get(), 0, now);
    ok = X509_verify_cert(ctx.get());
  }
  const int error = X509_STORE_CTX_get_error(ctx.get());
  X509* at = X509_STORE_CTX_get_current_cert(ctx.get());
  ctx.reset();
  sk_X509_free(untrusted);
  TakeOpenSslError();
  if (ok == 1) return absl::OkStatus();
  if (at == nullptr) at = chain[0].get();

  if (IsNotSignedError(error)) {
    std::vector<std::string> subjects;
    for (const Cert& c : cas) subjects.push_back(absl::StrCat("'", Subject(c.get()), "'"));
    const std::string issuer = Issuer(at);
    std::string problem = absl::StrCat(
        cert.Name(), " is not signed by ", ca.Name(), ": ",
        at == chain[0].get() ? "it was" : absl::StrCat("its chain's '", Subject(at), "' was"),
        " issued by '", issuer, "', and no certificate in tls.ca (", absl::StrJoin(subjects, ", "),
        ") signed it");
    for (const Cert& c : cas) {
      if (Subject(c.get()) == issuer) {
        absl::StrAppend(&problem, "; tls.ca holds a CA of that name but with another key");
        break;
      }
    }
    return absl::InvalidArgumentError(problem);
  }
  bool in_ca = false;
  for (const Cert& c : cas) in_ca = in_ca || X509_cmp(c.get(), at) == 0;
  const std::string where =
      in_ca ? absl::StrCat("the CA certificate '", Subject(at), "' of ", ca.Name())
            : absl::StrCat("the intermediate certificate '", Subject(at), "' of ", cert.Name());
  if (error == X509_V_ERR_CERT_HAS_EXPIRED || error == X509_V_ERR_CERT_NOT_YET_VALID) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " ", DateProblem(at, now), ", so no peer can verify ", cert.Name()));
  }
  return absl::InvalidArgumentError(
      absl::StrCat(cert.Name(), " does not verify against ", ca.Name(), ": ",
                   X509_verify_cert_error_string(error), " (at ",
                   at == chain[0].get() ? "its own certificate" : where, ")"));
}

}  // namespace

Status CheckTlsMaterial(const TlsConfig& tls, const std::string& site, std::time_t now) {
  const File ca = MakeFile("tls.ca", tls.ca_as_written, tls.ca_file);
  const File cert = MakeFile("tls.cert", tls.cert_as_written, tls.cert_file);
  const File key_file = MakeFile("tls.key", tls.key_as_written, tls.key_file);

  ASSIGN_OR_RETURN(std::vector<Cert> cas, ReadCerts(ca));
  ASSIGN_OR_RETURN(std::vector<Cert> chain, ReadCerts(cert));
  ASSIGN_OR_RETURN(Key key, ReadKey(key_file));
  X509* leaf = chain[0].get();

  const int matches = X509_check_private_key(leaf, key.get());
  TakeOpenSslError();
  if (matches != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(key_file.Name(), " does not match ", cert.Name(),
                     ": it is not the private key of the certificate '", Subject(leaf), "'"));
  }
  RETURN_IF_ERROR(CheckNames(leaf, cert, site));
  if (std::string problem = DateProblem(leaf, now); !problem.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(cert.Name(), " ", problem));
  }
  RETURN_IF_ERROR(CheckChain(chain, cas, cert, ca, now));
  // A site serves peers (TLS server) and dials them (TLS client) with the same certificate.
  for (auto [purpose, role] : {std::pair{X509_PURPOSE_SSL_SERVER, "server"},
                               std::pair{X509_PURPOSE_SSL_CLIENT, "client"}}) {
    const int allowed = X509_check_purpose(leaf, purpose, 0);
    TakeOpenSslError();
    if (allowed != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(cert.Name(), " may not serve TLS ", role,
                       " authentication (its keyUsage or extendedKeyUsage excludes it); a site "
                       "needs both serverAuth and clientAuth"));
    }
  }
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
