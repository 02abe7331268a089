// The Control gRPC service (control_service.h): the CLI's calls, each authorized by the
// bearer token, answered from the daemon's views and its JobHost.
#include "daemon/control_service.h"

#include "daemon/peer_security.h"
#include "daemon/transport/grpc_link.h"

namespace longhaul::daemon {

ControlServiceImpl::ControlServiceImpl(std::string token, ControlViews views, JobHost* jobs)
    : token_(std::move(token)), views_(std::move(views)), jobs_(jobs) {}

grpc::Status ControlServiceImpl::SubmitJob(grpc::ServerContext* context,
                                           const v1::SubmitJobRequest* request,
                                           v1::SubmitJobResponse* response) {
  grpc::Status auth = AuthorizeControlCall(*context, token_);
  if (!auth.ok()) return auth;
  auto r = jobs_->Submit(*request);
  if (!r.ok()) return transport::ToGrpc(r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::GetJob(grpc::ServerContext* context,
                                        const v1::GetJobRequest* request, v1::JobStatus* response) {
  grpc::Status auth = AuthorizeControlCall(*context, token_);
  if (!auth.ok()) return auth;
  auto r = jobs_->GetJob(request->job_id(), request->max_losses());
  if (!r.ok()) return transport::ToGrpc(r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest*,
                                          v1::ListJobsResponse* response) {
  grpc::Status auth = AuthorizeControlCall(*context, token_);
  if (!auth.ok()) return auth;
  *response = jobs_->ListJobs();
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::CancelJob(grpc::ServerContext* context,
                                           const v1::CancelJobRequest* request,
                                           v1::CancelJobResponse* response) {
  grpc::Status auth = AuthorizeControlCall(*context, token_);
  if (!auth.ok()) return auth;
  auto r = jobs_->Cancel(request->job_id());
  if (!r.ok()) return transport::ToGrpc(r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::ChangeJobSites(grpc::ServerContext* context,
                                                const v1::ChangeJobSitesRequest* request,
                                                v1::ChangeJobSitesResponse* response) {
  grpc::Status auth = AuthorizeControlCall(*context, token_);
  if (!auth.ok()) return auth;
  auto r = jobs_->ChangeSites(*request);
  if (!r.ok()) return transport::ToGrpc(r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::SetDebugThrottle(grpc::ServerContext* context,
                                                  const v1::DebugThrottleRequest* request,
                                                  v1::DebugThrottleResponse* response) {
  grpc::Status auth = AuthorizeControlCall(*context, token_);
  if (!auth.ok()) return auth;
  const double s = request->seconds_per_microbatch();
  if (!(s >= 0 && s <= 60)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "seconds_per_microbatch must be in [0, 60]");
  }
  response->set_previous_seconds(jobs_->set_throttle(s));
  return grpc::Status::OK;
}

grpc::Status ControlServiceImpl::ExportJob(grpc::ServerContext* context,
                                           const v1::ExportJobRequest* request,
                                           grpc::ServerWriter<v1::ExportChunk>* writer) {
  grpc::Status auth = AuthorizeControlCall(*context, token_);
  if (!auth.ok()) return auth;
  return transport::ToGrpc(jobs_->Export(
      request->job_id(), request->format(), request->dtype(),
      [&](const std::string& file, const std::string& bytes, uint64_t total) -> absl::Status {
        v1::ExportChunk c;
        c.set_total_bytes(total);
        c.set_data(bytes);
        c.set_file(file);
        if (!writer->Write(c)) return absl::CancelledError("client left");
        return absl::OkStatus();
      }));
}

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
