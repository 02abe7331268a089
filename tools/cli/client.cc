#include "tools/cli/client.h"

#include <google/protobuf/util/json_util.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "daemon/config.h"

namespace longhaul::cli {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// The daemon's control channel: TLS verified against `ca_file` when one is given.
std::shared_ptr<grpc::Channel> ControlChannel(const std::string& addr, const std::string& ca_file,
                                              const std::string& name) {
  if (ca_file.empty()) return grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  std::ifstream in(ca_file, std::ios::binary);
  std::stringstream pem;
  pem << in.rdbuf();
  if (!in || pem.str().find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    std::cerr << "longhaul: --tls-ca " << ca_file
              << ": cannot read a PEM certificate from it (the site CA, ca.pem)\n";
    return nullptr;
  }
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = pem.str();
  grpc::ChannelArguments args;
  if (!name.empty()) args.SetSslTargetNameOverride(name);
  return grpc::CreateCustomChannel(addr, grpc::SslCredentials(options), args);
}

}  // namespace

void PrintJson(const google::protobuf::Message& m) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = true;
  o.preserve_proto_field_names = true;
  o.always_print_primitive_fields = true;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  std::cout << out;
}

std::unique_ptr<ControlClient> ControlClient::Connect(const ClientOptions& options) {
  std::string addr = options.addr.empty() ? Env("LONGHAUL_ADDR") : options.addr;
  std::string token_file =
      options.token_file.empty() ? Env("LONGHAUL_TOKEN_FILE") : options.token_file;
  std::string tls_ca = options.tls_ca.empty() ? Env("LONGHAUL_TLS_CA") : options.tls_ca;
  std::string tls_name = options.tls_name.empty() ? Env("LONGHAUL_TLS_NAME") : options.tls_name;
  if (!options.config.empty()) {
    auto site = daemon::LoadSiteConfig(options.config);
    if (!site.ok()) {
      std::cerr << "longhaul: " << site.status().message() << "\n";
      return nullptr;
    }
    if (addr.empty()) addr = site->control_listen;
    if (token_file.empty()) token_file = site->token_file;
    if (site->tls && site->tls->control) {
      if (tls_ca.empty()) tls_ca = site->tls->ca_file;
      if (tls_name.empty()) tls_name = site->site;
    }
  }
  if (!tls_name.empty() && tls_ca.empty()) {
    std::cerr << "longhaul: --tls-name needs --tls-ca (the CA that signed the daemon's "
                 "certificate)\n";
    return nullptr;
  }
  if (addr.empty()) addr = "127.0.0.1:7102";
  if (token_file.empty()) {
    std::cerr << "longhaul: no token: pass --token-file FILE (or set LONGHAUL_TOKEN_FILE, or "
                 "--config SITE.yaml)\n";
    return nullptr;
  }
  auto token = daemon::ReadTokenFile(token_file);
  if (!token.ok()) {
    std::cerr << "longhaul: " << token.status().message() << "\n";
    return nullptr;
  }
  auto c = std::unique_ptr<ControlClient>(new ControlClient());
  c->addr_ = addr;
  c->token_ = *token;
  c->timeout_seconds_ = options.timeout_seconds;
  c->tls_ = !tls_ca.empty();
  auto channel = ControlChannel(addr, tls_ca, tls_name);
  if (!channel) return nullptr;
  c->stub_ = v1::Control::NewStub(channel);
  return c;
}

std::unique_ptr<grpc::ClientContext> ControlClient::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->AddMetadata("authorization", "Bearer " + token_);
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds_ * 1000)));
  return ctx;
}

int ControlClient::Fail(const grpc::Status& status, const std::string& what) const {
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      std::cerr << "longhaul: " << what << ": daemon at " << addr_
                << " is unreachable (is longhauld running there?"
                << (tls_ ? " does it serve TLS (tls.control), signed by --tls-ca, for --tls-name?"
                         : " does it need TLS (--tls-ca)?")
                << "): " << status.error_message() << "\n";
      return kExitUnreachable;
    case grpc::StatusCode::UNAUTHENTICATED:
      std::cerr << "longhaul: " << what << ": daemon at " << addr_
                << " refused the token: " << status.error_message() << "\n";
      return kExitRefused;
    case grpc::StatusCode::PERMISSION_DENIED:
      std::cerr << "longhaul: " << what << ": not permitted by the daemon at " << addr_ << ": "
                << status.error_message() << "\n";
      return kExitNotPermitted;
    case grpc::StatusCode::INVALID_ARGUMENT:
      std::cerr << "longhaul: " << what
                << ": the daemon refused the request: " << status.error_message() << "\n";
      return kExitUsage;
    case grpc::StatusCode::NOT_FOUND:
      std::cerr << "longhaul: " << what << ": " << status.error_message() << "\n";
      return kExitNotFound;
    default:
      std::cerr << "longhaul: " << what << ": " << status.error_message() << "\n";
      return kExitError;
  }
}

}  // namespace longhaul::cli
