#include "daemon/control_service.h"

#include "daemon/peer_security.h"

namespace longhaul::daemon {

ControlServiceImpl::ControlServiceImpl(std::string token, ControlViews views)
    : token_(std::move(token)), views_(std::move(views)) {}

grpc::Status ControlServiceImpl::GetNodeStatus(grpc::ServerContext* context,
                                               const v1::NodeStatusRequest*,
                                               v1::NodeStatus* response) {
  grpc::Status auth = AuthorizeControlCall(*context, token_);
  if (!auth.ok()) return auth;
  *response = views_.node_status();
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::ListLinks(grpc::ServerContext* context,
                                           const v1::ListLinksRequest*,
                                           v1::ListLinksResponse* response) {
  grpc::Status auth = AuthorizeControlCall(*context, token_);
  if (!auth.ok()) return auth;
  *response = views_.links();
  return grpc::Status::OK;
}

}  // namespace longhaul::daemon
