// The Control gRPC service: what the `longhaul` CLI asks a daemon: node status, links and
// jobs. Every call must carry the site's bearer token.
#pragma once

#include <functional>
#include <string>

#include "daemon/job/host/job_host.h"
#include "proto/longhaul.grpc.pb.h"

namespace longhaul::daemon {

struct ControlViews {
  std::function<v1::NodeStatus()> node_status;
  std::function<v1::ListLinksResponse()> links;
};

class ControlServiceImpl final : public v1::Control::Service {
 public:
  ControlServiceImpl(std::string token, ControlViews views, JobHost* jobs);

  grpc::Status GetNodeStatus(grpc::ServerContext* context, const v1::NodeStatusRequest* request,
                             v1::NodeStatus* response) override;
  grpc::Status ListLinks(grpc::ServerContext* context, const v1::ListLinksRequest* request,
                         v1::ListLinksResponse* response) override;
  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::JobStatus* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status ChangeJobSites(grpc::ServerContext* context,
                              const v1::ChangeJobSitesRequest* request,
                              v1::ChangeJobSitesResponse* response) override;
  grpc::Status ExportJob(grpc::ServerContext* context, const v1::ExportJobRequest* request,
                         grpc::ServerWriter<v1::ExportChunk>* writer) override;
  grpc::Status SetDebugThrottle(grpc::ServerContext* context,
                                const v1::DebugThrottleRequest* request,
                                v1::DebugThrottleResponse* response) override;

 private:
  const std::string token_;
  const ControlViews views_;
  JobHost* const jobs_;
};

}  // namespace longhaul::daemon
