#include "tools/cli/client.h"

#include <google/protobuf/util/json_util.h>

#include <cstdlib>
#include <iostream>

#include "daemon/config.h"

namespace longhaul::cli {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
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
  if (!options.config.empty()) {
    auto site = daemon::LoadSiteConfig(options.config);
    if (!site.ok()) {
      std::cerr << "longhaul: " << site.status().message() << "\n";
      return nullptr;
    }
    if (addr.empty()) addr = site->control_listen;
    if (token_file.empty()) token_file = site->token_file;
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
  c->stub_ = v1::Control::NewStub(grpc::CreateChannel(addr, grpc::InsecureChannelCredentials()));
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
                << " is unreachable (is longhauld running there?): " << status.error_message()
                << "\n";
      return kExitUnreachable;
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      std::cerr << "longhaul: " << what << ": daemon at " << addr_
                << " refused the token: " << status.error_message() << "\n";
      return kExitRefused;
    default:
      std::cerr << "longhaul: " << what << ": " << status.error_message() << "\n";
      return kExitError;
  }
}

}  // namespace longhaul::cli
