// How the CLI reaches a daemon: the control address, bearer token and TLS settings come from
// flags, the environment (LONGHAUL_ADDR, LONGHAUL_TOKEN_FILE, LONGHAUL_TLS_CA,
// LONGHAUL_TLS_NAME) or a site config (--config), in that order. With a CA the CLI talks TLS
// and checks that the daemon's certificate comes from that CA and names the expected site.
// Errors map to distinct exit codes so scripts can tell "down" from "refused".
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "proto/longhaul.grpc.pb.h"

namespace longhaul::cli {

// One exit code per class of error: usage covers a bad request the daemon refused too
// (INVALID_ARGUMENT: a bad job file, an unknown export format); refused is the token alone
// (UNAUTHENTICATED); not permitted is what the token may not do (PERMISSION_DENIED: a file
// outside the site's data_roots); not found is an unknown job (NOT_FOUND).
enum ExitCode {
  kExitOk = 0,
  kExitError = 1,
  kExitUsage = 2,
  kExitUnreachable = 3,
  kExitRefused = 4,
  kExitNotPermitted = 5,
  kExitNotFound = 6,
};

struct ClientOptions {
  std::string addr;
  std::string token_file;
  std::string config;    // a site config to take addr, token_file and TLS settings from
  std::string tls_ca;    // PEM CA file: talk TLS and verify the daemon's certificate with it
  std::string tls_name;  // the name the daemon's certificate must carry (its site name)
  double timeout_seconds = 5;
  std::string output = "table";  // table | json
};

// Prints a message as JSON with the .proto field names (the CLI's `-o json`).
void PrintJson(const google::protobuf::Message& m);

class ControlClient {
 public:
  // Resolves the address and reads the token; on failure prints why and returns nullptr.
  static std::unique_ptr<ControlClient> Connect(const ClientOptions& options);

  // A context with the token and deadline set.
  std::unique_ptr<grpc::ClientContext> Context() const;
  v1::Control::Stub& stub() { return *stub_; }
  const std::string& addr() const { return addr_; }

  // Prints a clear message for a failed call and returns the exit code for it.
  int Fail(const grpc::Status& status, const std::string& what) const;

 private:
  std::string addr_;
  std::string token_;
  double timeout_seconds_ = 5;
  bool tls_ = false;
  std::unique_ptr<v1::Control::Stub> stub_;
};

}  // namespace longhaul::cli
