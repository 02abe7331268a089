// How sites and the CLI authenticate (peer_security.h): TLS credentials for the peer and
// control servers, peer channels, the caller of a Peer RPC, the control token check.
#include "daemon/peer_security.h"

#include <openssl/crypto.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace longhaul::daemon {
namespace {

StatusOr<std::string> ReadPem(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("tls.", what, ": cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tls.", what, ": ", path, " is empty"));
  }
  return ss.str();
}

struct TlsFiles {
  std::string ca, cert, key;
};

StatusOr<TlsFiles> ReadTls(const TlsConfig& tls) {
  TlsFiles f;
  ASSIGN_OR_RETURN(f.ca, ReadPem(tls.ca_file, "ca"));
  ASSIGN_OR_RETURN(f.cert, ReadPem(tls.cert_file, "cert"));
  ASSIGN_OR_RETURN(f.key, ReadPem(tls.key_file, "key"));
  return f;
}

}  // namespace

StatusOr<std::shared_ptr<grpc::ServerCredentials>> PeerServerCredentials(
    const std::optional<TlsConfig>& tls) {
  if (!tls) return grpc::InsecureServerCredentials();
  ASSIGN_OR_RETURN(TlsFiles f, ReadTls(*tls));
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = f.ca;
  options.pem_key_cert_pairs.push_back({f.key, f.cert});
  return grpc::SslServerCredentials(options);
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> ControlServerCredentials(
    const std::optional<TlsConfig>& tls) {
  if (!tls || !tls->control) return grpc::InsecureServerCredentials();
  ASSIGN_OR_RETURN(TlsFiles f, ReadTls(*tls));
  grpc::SslServerCredentialsOptions options(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_key_cert_pairs.push_back({f.key, f.cert});
  return grpc::SslServerCredentials(options);
}

StatusOr<std::shared_ptr<grpc::Channel>> PeerChannel(const std::optional<TlsConfig>& tls,
                                                     const std::string& peer,
                                                     const std::string& address) {
  grpc::ChannelArguments args;
  // Each peer gets its own connection, even when two peers share an address (tests).
  args.SetString("longhaul.peer", peer);
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  if (!tls) {
    return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
  }
  ASSIGN_OR_RETURN(TlsFiles f, ReadTls(*tls));
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = f.ca;
  options.pem_private_key = f.key;
  options.pem_cert_chain = f.cert;
  // The server's certificate must name the peer we meant to reach.
  args.SetSslTargetNameOverride(peer);
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(options), args);
}

grpc::Status AuthorizePeerCall(const grpc::ServerContext& context, bool tls,
                               const std::set<std::string>& peers,
                               const std::string& claimed_site) {
  if (!peers.count(claimed_site)) {
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        "site '" + claimed_site + "' is not a configured peer of this site");
  }
  if (!tls) return grpc::Status::OK;
  auto auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no verified client certificate");
  }
  std::vector<std::string> names;
  for (const char* property : {"x509_subject_alternative_name", "x509_common_name"}) {
    for (const auto& v : auth->FindPropertyValues(property)) names.emplace_back(v.data(), v.size());
  }
  for (const auto& n : names) {
    if (n == claimed_site) return grpc::Status::OK;
  }
  std::string got;
  for (const auto& n : names) got += (got.empty() ? "" : ",") + n;
  return grpc::Status(
      grpc::StatusCode::PERMISSION_DENIED,
      "certificate names [" + got + "], but the caller claims to be site '" + claimed_site + "'");
}

StatusOr<std::string> PeerCaller(const grpc::ServerContext& context, bool tls,
                                 const std::set<std::string>& peers,
                                 const std::string& claimed_site) {
  if (!tls) {
    if (claimed_site.empty()) {
      return absl::UnauthenticatedError("the call names no calling site (from_site is empty)");
    }
    if (!peers.count(claimed_site)) {
      return absl::PermissionDeniedError("site '" + claimed_site.substr(0, 64) +
                                         "' is not a configured peer of this site");
    }
    return claimed_site;
  }
  auto auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) {
    return absl::UnauthenticatedError("no verified client certificate");
  }
  std::vector<std::string> names, configured;
  for (const char* property : {"x509_subject_alternative_name", "x509_common_name"}) {
    for (const auto& v : auth->FindPropertyValues(property)) {
      std::string n(v.data(), v.size());
      if (peers.count(n) && std::find(configured.begin(), configured.end(), n) == configured.end())
        configured.push_back(n);
      names.push_back(std::move(n));
    }
  }
  std::string got;
  for (const auto& n : names) got += (got.empty() ? "" : ",") + n.substr(0, 64);
  if (!claimed_site.empty()) {
    for (const auto& n : configured) {
      if (n == claimed_site) return n;
    }
    return absl::PermissionDeniedError("certificate names [" + got +
                                       "], but the caller claims to be site '" +
                                       claimed_site.substr(0, 64) + "'");
  }
  if (configured.size() == 1) return configured[0];
  return absl::PermissionDeniedError(
      configured.empty() ? "the caller's certificate names no configured peer ([" + got + "])"
                         : "the caller's certificate names several configured peers ([" + got +
                               "]) and the call claims none of them");
}

grpc::Status AuthorizeAnyPeer(const grpc::ServerContext& context, bool tls,
                              const std::set<std::string>& peers) {
  if (!tls) return grpc::Status::OK;
  auto auth = context.auth_context();
  if (!auth || !auth->IsPeerAuthenticated()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "no verified client certificate");
  }
  for (const char* property : {"x509_subject_alternative_name", "x509_common_name"}) {
    for (const auto& v : auth->FindPropertyValues(property)) {
      if (peers.count(std::string(v.data(), v.size()))) return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                      "the caller's certificate names no configured peer");
}

grpc::Status AuthorizeControlCall(const grpc::ServerContext& context, const std::string& token) {
  const auto& md = context.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "missing bearer token (pass --token-file)");
  }
  const std::string value(it->second.data(), it->second.size());
  const std::string expected = "Bearer " + token;
  if (value.size() != expected.size() ||
      CRYPTO_memcmp(value.data(), expected.data(), value.size()) != 0) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "bearer token refused");
  }
  return grpc::Status::OK;
}

}  // namespace longhaul::daemon
