#include "daemon/job/site_channel.h"

#include <chrono>

namespace longhaul::daemon {

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return Status(static_cast<absl::StatusCode>(s.error_code()), what + ": " + s.error_message());
}

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

namespace {

void SetTimeout(grpc::ClientContext* ctx, double seconds) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)));
}

class RemoteSiteChannel final : public SiteChannel {
 public:
  RemoteSiteChannel(std::string self, std::string site, std::shared_ptr<grpc::Channel> channel)
      : self_(std::move(self)), site_(std::move(site)), stub_(v1::Peer::NewStub(channel)) {}

  const std::string& site() const override { return site_; }

  StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& a, double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::AssignResponse r;
    RETURN_IF_ERROR(FromGrpc(stub_->AssignStage(&ctx, a, &r), "site '" + site_ + "'"));
    return r;
  }

  StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& command,
                                              double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::JobCommand c = command;
    c.set_from_site(self_);
    v1::JobCommandResponse r;
    RETURN_IF_ERROR(FromGrpc(stub_->ControlJob(&ctx, c, &r), "site '" + site_ + "'"));
    return r;
  }

  StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& report, double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::StepReport rep = report;
    rep.set_from_site(self_);
    v1::StepDecision d;
    RETURN_IF_ERROR(FromGrpc(stub_->ReportStep(&ctx, rep, &d), "coordinator '" + site_ + "'"));
    return d;
  }

  Status FetchFragment(const v1::FetchFragmentRequest& request,
                       const std::function<Status(const v1::TensorFrame&)>& sink) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, 600);
    v1::FetchFragmentRequest req = request;
    req.set_from_site(self_);
    auto reader = stub_->FetchFragment(&ctx, req);
    v1::TensorFrame f;
    Status status;
    while (reader->Read(&f)) {
      if (status.ok()) status = sink(f);
    }
    grpc::Status s = reader->Finish();
    RETURN_IF_ERROR(FromGrpc(s, "site '" + site_ + "'"));
    return status;
  }

  StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest& request,
                                             double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::ProfileSiteRequest req = request;
    req.set_from_site(self_);
    v1::SiteProfileReply r;
    RETURN_IF_ERROR(FromGrpc(stub_->ProfileSite(&ctx, req, &r), "site '" + site_ + "'"));
    return r;
  }

 private:
  std::string self_;
  std::string site_;
  std::unique_ptr<v1::Peer::Stub> stub_;
};

}  // namespace

std::unique_ptr<SiteChannel> MakeRemoteSiteChannel(std::string self, std::string site,
                                                   std::shared_ptr<grpc::Channel> channel) {
  return std::make_unique<RemoteSiteChannel>(std::move(self), std::move(site), std::move(channel));
}

}  // namespace longhaul::daemon
