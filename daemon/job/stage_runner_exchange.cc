// StageRunner's exchange with its neighbours: the codec chosen per tensor from the link's
// measured rate, encoding on the device or the host, the one pending send whose device work
// overlaps the next compute, and receiving (decoded on the device or into host memory).
#include <cstring>

#include "compression/codec.h"
#include "compression/frame.h"
#include "daemon/job/stage_runner.h"

namespace longhaul::daemon {

Status StageRunner::Send(LinkSender* to, OutboundUsage* usage, compression::ControllerState* state,
                         v1::TensorKind kind, uint64_t step, int mb, const float* host, size_t n,
                         std::vector<int64_t> shape, bool adaptive, const float* device) {
  // One tensor in flight (also one left pending because the link's queue was full): sends keep
  // their order.
  RETURN_IF_ERROR(FinishPendingSend());
  int rung = 0;  // fp32: exact
  std::string reason = "exact (not an activation or gradient)";
  if (adaptive) {
    if (fixed_rung_ >= 0) {
      rung = fixed_rung_;
      reason = std::string("compression ") + CompressionModeName(ctx_.spec.compression) + ": " +
               controller_->name(rung);
    } else {
      const std::string& peer = usage->to_site;
      const v1::LinkEstimate e = ctx_.monitor->Outbound(peer);
      compression::ControllerInput in;
      in.bandwidth_bytes_per_second = e.bandwidth_bytes_per_second();
      // Transfers are pipelined (several in flight, queued behind compute), so what a tensor
      // costs the link is its serialisation time; the round trip only delays the pipeline
      // once, at fill, and no codec can shorten it.
      in.rtt_seconds = 0;
      in.tensor_bytes = n * sizeof(float);
      in.budget_seconds = budget_seconds_ > 0 ? budget_seconds_ : 0.05;
      in.quality_floor = quality_floor_;
      in.now_seconds = Now();
      ASSIGN_OR_RETURN(auto d, controller_->Decide(in, *state));
      *state = d.next;
      rung = d.rung;
      reason = d.explanation;
    }
  }
  const compression::CodecSpec spec = controller_->spec(rung);
  compression::EncodeOptions eo;
  eo.seed = step * 1000003 + mb * 31 + kind;
  // The frame's envelope, once the payload is encoded, and what the link's usage counts once
  // the tensor is queued.
  auto envelope = [this, kind, step, mb, n, shape, rung](OutgoingTensor* t) {
    v1::TensorFrame& h = t->header;
    h.set_job_id(ctx_.assignment.job_id());
    h.set_attempt(attempt());
    h.set_step(step);
    h.set_microbatch(mb);
    h.set_kind(kind);
    h.set_tensor_id(kMainTensor);
    for (int64_t d : shape) h.add_shape(d);
    h.mutable_codec()->add_stages()->set_name(controller_->name(rung));
    h.set_raw_size(n * sizeof(float));
    h.set_from_stage(stage_);
    int to_stage = kind == v1::TENSOR_KIND_ACTIVATION_GRAD ? stage_ - 1 : stage_ + 1;
    if (kind == v1::TENSOR_KIND_WEIGHT_GRAD) to_stage = fragment_->is_first() ? num_stages_ - 1 : 0;
    h.set_to_stage(to_stage);
    h.set_from_site(ctx_.site);
  };
  auto count = [this, usage, n, adaptive, rung, reason](uint64_t wire, bool on_device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (adaptive) {
      usage->codec = controller_->name(rung);
      usage->reason = reason;
    }
    ++usage->tensors;
    if (on_device) ++usage->device_tensors;
    usage->raw_bytes += n * sizeof(float);
    usage->wire_bytes += wire;
  };
  if (device != nullptr && device_encoder_ && device_encoder_->Supports(spec)) {
    RETURN_IF_ERROR(device_encoder_->Start(spec, device, n, eo));
    if (!device_encode_logged_ && ctx_.log) {
      device_encode_logged_ = true;
      ctx_.log->info("job {}: stage {} encodes on {} before the copy to the host ({})",
                     ctx_.assignment.job_id(), stage_, ops_[0]->name(), controller_->name(rung));
    }
    pending_.emplace(PendingSend{});
    pending_->to = to;
    pending_->frame = [this, spec, shape, n, envelope](OutgoingTensor* t) -> Status {
      bool finished = false;
      const Status framed = compression::EncodeFrameWith(
          spec, shape, n,
          [&](std::vector<uint8_t>* out) {
            finished = true;
            return device_encoder_->Finish(out);
          },
          &t->payload);
      if (!finished) {  // the frame failed before its payload: end the copy all the same
        std::vector<uint8_t> discard;
        (void)device_encoder_->Finish(&discard);
      }
      RETURN_IF_ERROR(framed);
      envelope(t);
      return absl::OkStatus();
    };
    pending_->count = [count](uint64_t wire) { count(wire, true); };
    return absl::OkStatus();
  }
  if (device != nullptr) {  // fp32 or a codec the GPU lacks: the floats come to the host
    ops_[0]->Download(host_buf_.data(), device, n);
    host = host_buf_.data();
  }
  OutgoingTensor t;
  ASSIGN_OR_RETURN(auto codec, compression::MakeCodec(spec));
  RETURN_IF_ERROR(compression::EncodeFrame(*codec, {host, n}, shape, eo, &t.payload));
  envelope(&t);
  const uint64_t wire = t.payload.size();
  RETURN_IF_ERROR(to->Enqueue(std::move(t)));
  count(wire, false);
  return absl::OkStatus();
}

Status StageRunner::FinishPendingSend(bool wait) {
  if (!pending_) return absl::OkStatus();
  const double start = Now();
  Status s = [&]() -> Status {
    if (pending_->frame) {
      const auto frame = std::move(pending_->frame);
      pending_->frame = nullptr;
      RETURN_IF_ERROR(frame(&pending_->tensor));
    }
    const uint64_t wire = pending_->tensor.payload.size();
    if (wait) {
      RETURN_IF_ERROR(pending_->to->Enqueue(std::move(pending_->tensor)));
    } else {
      ASSIGN_OR_RETURN(const bool queued, pending_->to->TryEnqueue(&pending_->tensor));
      if (!queued) return absl::OkStatus();  // the link's queue is full: stays pending, framed
    }
    pending_->count(wire);
    pending_.reset();
    return absl::OkStatus();
  }();
  if (!s.ok()) pending_.reset();
  if (wait) send_seconds_ += Now() - start;
  return s;
}

Status StageRunner::SendError() const {
  for (const LinkSender* sender : {ctx_.to_prev.get(), ctx_.to_next.get(), ctx_.to_tied.get()}) {
    if (sender == nullptr) continue;
    RETURN_IF_ERROR(sender->error());
  }
  return absl::OkStatus();
}

StatusOr<const float*> StageRunner::ReceiveInput(v1::TensorKind kind, uint64_t step, int mb) {
  const size_t n = static_cast<size_t>(B_) * T_ * C_;
  float* staged = device_decoder_ ? fragment_->DeviceInput() : nullptr;
  bool on_device = false;
  RETURN_IF_ERROR(Receive(kind, step, mb, host_buf_.data(), n, staged, &on_device));
  return on_device ? staged : host_buf_.data();
}

Status StageRunner::Receive(v1::TensorKind kind, uint64_t step, int mb, float* host, size_t n,
                            float* device, bool* on_device) {
  const TensorKey key{attempt(), step, static_cast<uint32_t>(mb), kind, kMainTensor};
  if (stop_) return absl::AbortedError("stopped");
  const double start = Now(), sending = send_seconds_;
  StatusOr<ReceivedTensor> t = ctx_.inbox->Take(key, 0);
  if (!t.ok() && t.status().code() == absl::StatusCode::kDeadlineExceeded) {
    RETURN_IF_ERROR(FinishPendingSend());  // not here yet: nothing stays pending while waiting
    while (true) {
      if (stop_) return absl::AbortedError("stopped");
      // A tensor of ours the neighbour refused means it will not answer: fail now, naming it.
      RETURN_IF_ERROR(SendError());
      t = ctx_.inbox->Take(key, ctx_.heartbeat_seconds);
      if (t.ok() || t.status().code() != absl::StatusCode::kDeadlineExceeded) break;
    }
  }
  wait_acc_ += Now() - start - (send_seconds_ - sending);
  if (!t.ok()) return t.status();
  compression::FrameLimits limits;
  limits.max_elements = n;
  ASSIGN_OR_RETURN(const compression::FrameHeader header,
                   compression::ParseFrameHeader(t->payload, limits));
  if (header.element_count != n) {
    return absl::InvalidArgumentError("tensor " + key.DebugString() + " from " + t->from_site +
                                      " has " + std::to_string(header.element_count) +
                                      " values, expected " + std::to_string(n));
  }
  if (device != nullptr && device_decoder_ && device_decoder_->Supports(header.spec)) {
    RETURN_IF_ERROR(
        compression::DecodeFramePayload(header, t->payload, [&](std::span<const uint8_t> payload) {
          return device_decoder_->Decode(header.spec, payload, n, device);
        }));
    *on_device = true;
    if (!device_decode_logged_ && ctx_.log) {
      device_decode_logged_ = true;
      ctx_.log->info("job {}: stage {} decodes on {} after the copy from the host ({})",
                     ctx_.assignment.job_id(), stage_, ops_[0]->name(), header.spec.ToString());
    }
    return absl::OkStatus();
  }
  return compression::DecodeFrameValues(header, t->payload, {host, n});
}

}  // namespace longhaul::daemon
