#include "daemon/peer_security.h"

#include <openssl/crypto.h>

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
