// The gRPC Link (grpc_link.h).
#include "daemon/transport/grpc_link.h"

#include <algorithm>
#include <chrono>

#include "daemon/transport/frame_assembler.h"

namespace longhaul::daemon::transport {

Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return Status(static_cast<absl::StatusCode>(s.error_code()), what + ": " + s.error_message());
}

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

bool WriteChunks(const WireTensor& tensor, size_t chunk_bytes,
                 const std::function<bool(const v1::TensorFrame&)>& write) {
  const size_t n = tensor.payload.size();
  const uint32_t chunks =
      static_cast<uint32_t>(std::max<size_t>(1, (n + chunk_bytes - 1) / chunk_bytes));
  for (uint32_t i = 0; i < chunks; ++i) {
    v1::TensorFrame f = tensor.header;
    const size_t off = static_cast<size_t>(i) * chunk_bytes;
    const size_t len = std::min(chunk_bytes, n - off);
    f.set_encoded_size(n);
    f.set_chunk_index(i);
    f.set_chunk_count(chunks);
    f.set_chunk_offset(off);
    f.set_payload(tensor.payload.data() + off, len);
    if (!write(f)) return false;
  }
  return true;
}

namespace {

void SetTimeout(grpc::ClientContext* ctx, double seconds) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)));
}

// A fragment fetch carries the tensors of one stage checkpoint, each at most this large
// (fragment slices, job_host_peer.cc, plus a frame header).
constexpr uint64_t kMaxFragmentTensorBytes = (uint64_t{64} << 20) + 4096;

class GrpcLink final : public Link {
 public:
  GrpcLink(std::string self, std::string site, std::shared_ptr<grpc::Channel> channel)
      : self_(std::move(self)), site_(std::move(site)), stub_(v1::Peer::NewStub(channel)) {}

  const std::string& site() const override { return site_; }

  StatusOr<v1::HelloResponse> Hello(const v1::HelloRequest& request, double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::HelloRequest r = request;
    r.set_from_site(self_);
    v1::HelloResponse response;
    RETURN_IF_ERROR(FromGrpc(stub_->Hello(&ctx, r, &response), Who("Hello")));
    return response;
  }

  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request,
                                            double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::HeartbeatRequest r = request;
    r.set_from_site(self_);
    v1::HeartbeatResponse response;
    RETURN_IF_ERROR(FromGrpc(stub_->Heartbeat(&ctx, r, &response), Who("Heartbeat")));
    return response;
  }

  StatusOr<v1::ProbeResult> Probe(const ProbeRequest& request) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, request.timeout_seconds);
    v1::ProbeResult result;
    auto writer = stub_->Probe(&ctx, &result);
    const std::string filler(std::max<size_t>(1, request.chunk_bytes), '\x5a');
    uint64_t sent = 0;
    while (sent < request.bytes) {
      v1::ProbeChunk chunk;
      if (sent == 0) chunk.set_from_site(self_);
      chunk.set_probe_id(request.probe_id);
      const size_t n = std::min<uint64_t>(filler.size(), request.bytes - sent);
      chunk.set_filler(filler.data(), n);
      if (!writer->Write(chunk)) break;
      sent += n;
    }
    writer->WritesDone();
    RETURN_IF_ERROR(FromGrpc(writer->Finish(), Who("Probe")));
    return result;
  }

  StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& a, double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::AssignResponse r;
    RETURN_IF_ERROR(FromGrpc(stub_->AssignStage(&ctx, a, &r), Who("AssignStage")));
    return r;
  }

  StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& command,
                                              double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::JobCommand c = command;
    c.set_from_site(self_);
    v1::JobCommandResponse r;
    RETURN_IF_ERROR(FromGrpc(stub_->ControlJob(&ctx, c, &r), Who("ControlJob")));
    return r;
  }

  StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& report, double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::StepReport r = report;
    r.set_from_site(self_);
    v1::StepDecision d;
    RETURN_IF_ERROR(FromGrpc(stub_->ReportStep(&ctx, r, &d), "coordinator '" + site_ + "'"));
    return d;
  }

  StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest& request,
                                             double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::ProfileSiteRequest r = request;
    r.set_from_site(self_);
    v1::SiteProfileReply reply;
    RETURN_IF_ERROR(FromGrpc(stub_->ProfileSite(&ctx, r, &reply), Who("ProfileSite")));
    return reply;
  }

  Status FetchFragment(const v1::FetchFragmentRequest& request, const TensorSink& sink) override {
    grpc::ClientContext ctx;
    // Generous: a whole GPT-2 XL fragment with its optimizer state at 100 Mbit/s.
    SetTimeout(&ctx, 3600);
    v1::FetchFragmentRequest req = request;
    req.set_from_site(self_);
    auto reader = stub_->FetchFragment(&ctx, req);
    Status sink_error;
    FrameAssembler assembler(
        [&](const v1::TensorFrame& first) -> Status {
          const v1::TensorKind kind = first.kind();
          if (kind != v1::TENSOR_KIND_PARAMETERS && kind != v1::TENSOR_KIND_OPTIMIZER_STATE &&
              kind != v1::TENSOR_KIND_LOADER_STATE) {
            return absl::DataLossError("a " + v1::TensorKind_Name(kind) + " tensor in a fragment");
          }
          if (first.job_id() != request.job_id() ||
              first.encoded_size() > kMaxFragmentTensorBytes) {
            return absl::DataLossError("a fragment tensor of job '" + first.job_id() + "', " +
                                       std::to_string(first.encoded_size()) + " bytes");
          }
          return absl::OkStatus();
        },
        [&](const v1::TensorFrame& first, std::vector<uint8_t> payload) -> Status {
          WireTensor t{first, std::move(payload)};
          sink_error = sink(std::move(t));
          return sink_error;
        });
    v1::TensorFrame f;
    Status stream;
    while (reader->Read(&f)) {
      stream = assembler.Add(f);
      if (!stream.ok()) break;
    }
    if (!stream.ok()) {
      ctx.TryCancel();
      (void)reader->Finish();
      if (!sink_error.ok()) return sink_error;  // the caller's own refusal, as it said it
      return Annotate(stream, Who("FetchFragment"));
    }
    RETURN_IF_ERROR(FromGrpc(reader->Finish(), Who("FetchFragment")));
    return Annotate(assembler.Finish(), Who("FetchFragment"));
  }

  Status SendTensor(const WireTensor& tensor, double timeout) override {
    grpc::ClientContext ctx;
    SetTimeout(&ctx, timeout);
    v1::FrameAck ack;
    auto writer = stub_->SendFrames(&ctx, &ack);
    WriteChunks(tensor, kChunkBytes, [&](const v1::TensorFrame& f) { return writer->Write(f); });
    writer->WritesDone();
    return FromGrpc(writer->Finish(), Who("SendFrames"));
  }

 private:
  std::string Who(const char* call) const { return "site '" + site_ + "' (" + call + ")"; }

  const std::string self_, site_;
  std::unique_ptr<v1::Peer::Stub> stub_;
};

}  // namespace

std::unique_ptr<Link> MakeGrpcLink(std::string self, std::string site,
                                   std::shared_ptr<grpc::Channel> channel) {
  return std::make_unique<GrpcLink>(std::move(self), std::move(site), std::move(channel));
}

}  // namespace longhaul::daemon::transport
