// The Control gRPC service: what the `longhaul` CLI asks a daemon. Every call must carry the
// site's bearer token. The service only reads; the daemon supplies the views.
#pragma once

#include <functional>
#include <string>

#include "proto/longhaul.grpc.pb.h"

namespace longhaul::daemon {

struct ControlViews {
  std::function<v1::NodeStatus()> node_status;
  std::function<v1::ListLinksResponse()> links;
};

class ControlServiceImpl final : public v1::Control::Service {
 public:
  ControlServiceImpl(std::string token, ControlViews views);

  grpc::Status GetNodeStatus(grpc::ServerContext* context, const v1::NodeStatusRequest* request,
                             v1::NodeStatus* response) override;
  grpc::Status ListLinks(grpc::ServerContext* context, const v1::ListLinksRequest* request,
                         v1::ListLinksResponse* response) override;

 private:
  const std::string token_;
  const ControlViews views_;
};

}  // namespace longhaul::daemon
