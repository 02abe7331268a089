// StageExchange (stage_exchange.h): codec choice, encoding on the device or the host, the one
// pending send, usage per link; receiving, with the senders checked while waiting, and
// decoding on the device or into host memory.
#include "daemon/job/exchange/stage_exchange.h"

#include <cmath>

#include "compression/codec.h"
#include "compression/frame.h"

namespace longhaul::daemon {
namespace {

// Tensors within one (step, microbatch, kind).
constexpr uint32_t kMainTensor = 0;

}  // namespace

StageExchange::StageExchange(StageExchangeOptions options) : o_(std::move(options)) {
  encoder_ = std::move(o_.encoder);
  decoder_ = std::move(o_.decoder);
  host_buf_.resize(o_.host_floats);
  prev_usage_.to_site = o_.prev_site;
  next_usage_.to_site = o_.next_site;
  tied_usage_.to_site = o_.tied_site;
  if (o_.tied_codec.empty() || o_.tied_codec == "exact") {
    tied_usage_.codec = "fp32";
    tied_usage_.reason =
        "exact: the tied embedding's exchange (compression.tied: exact), so that both copies "
        "take identical steps";
  } else {
    tied_usage_.codec = o_.tied_codec;
    tied_usage_.reason =
        "compression.tied, with error feedback: both ends add the parts as "
        "their frames carry them";
  }
}

StatusOr<std::unique_ptr<StageExchange>> StageExchange::Create(StageExchangeOptions options) {
  if (options.file_env == nullptr) {
    return absl::InvalidArgumentError("stage exchange of job " + options.job_id + ": no file env");
  }
  std::unique_ptr<StageExchange> x(new StageExchange(std::move(options)));
  ASSIGN_OR_RETURN(x->fp32_, compression::ParseCodecSpec("fp32"));
  for (int i = 0; i < 2; ++i) {
    const JobSpec::DirectionCodecs& codecs = i == 0 ? x->o_.activations : x->o_.gradients;
    Direction& d = x->directions_[i];
    compression::ControllerOptions co;
    co.ladder = codecs.ladder;
    ASSIGN_OR_RETURN(auto controller, compression::Controller::Create(co));
    d.controller = std::make_unique<compression::Controller>(std::move(controller));
    ASSIGN_OR_RETURN(d.quality_floor, d.controller->FindRung(codecs.floor));
    if (x->o_.compression == CompressionMode::kFixed) {
      ASSIGN_OR_RETURN(d.fixed_rung, d.controller->FindRung(codecs.codec));
    } else if (x->o_.compression == CompressionMode::kOff) {
      ASSIGN_OR_RETURN(d.fixed_rung, d.controller->FindRung("fp32"));
    }
  }
  return x;
}

LinkSender* StageExchange::Sender(To to) const {
  switch (to) {
    case To::kPrev:
      return o_.to_prev;
    case To::kNext:
      return o_.to_next;
    default:
      return o_.to_tied;
  }
}

StatusOr<LinkSender*> StageExchange::SenderFor(To to, v1::TensorKind kind) const {
  LinkSender* sender = Sender(to);
  if (sender == nullptr) {
    return absl::InternalError("stage " + std::to_string(o_.stage) + " of job " + o_.job_id +
                               " has no link for a " + v1::TensorKind_Name(kind) + " tensor");
  }
  return sender;
}

void StageExchange::Envelope(v1::TensorKind kind, uint64_t step, int mb, v1::TensorFrame* h) const {
  h->set_job_id(o_.job_id);
  h->set_attempt(o_.attempt);
  h->set_step(step);
  h->set_microbatch(mb);
  h->set_kind(kind);
  h->set_tensor_id(kMainTensor);
  h->set_from_stage(o_.stage);
  h->set_to_stage(ToStage(kind));
  h->set_from_site(o_.site);
}

Status StageExchange::SendFrame(To to, v1::TensorKind kind, uint64_t step, int mb,
                                std::vector<uint8_t> frame, size_t n) {
  RETURN_IF_ERROR(FinishPendingSend());
  ASSIGN_OR_RETURN(LinkSender * sender, SenderFor(to, kind));
  OutgoingTensor t;
  Envelope(kind, step, mb, &t.header);
  t.payload = std::move(frame);
  const uint64_t wire = t.payload.size();
  RETURN_IF_ERROR(sender->Enqueue(std::move(t)));
  MutexLock lock(mu_);
  OutboundUsage* usage = UsageOf(to);
  ++usage->tensors;
  usage->raw_bytes += n * sizeof(float);
  usage->wire_bytes += wire;
  return absl::OkStatus();
}

OutboundUsage* StageExchange::UsageOf(To to) {
  switch (to) {
    case To::kPrev:
      return &prev_usage_;
    case To::kNext:
      return &next_usage_;
    default:
      return &tied_usage_;
  }
}

int StageExchange::FromStage(v1::TensorKind kind) const {
  if (kind == v1::TENSOR_KIND_WEIGHT_GRAD || kind == v1::TENSOR_KIND_TIED_ROUND) {
    return o_.tied_stage;
  }
  if (kind == v1::TENSOR_KIND_ACTIVATION_GRAD || kind == v1::TENSOR_KIND_GRAD_SUMS) {
    return o_.stage + 1;
  }
  return o_.stage - 1;
}

int StageExchange::ToStage(v1::TensorKind kind) const {
  if (kind == v1::TENSOR_KIND_ACTIVATION_GRAD || kind == v1::TENSOR_KIND_GRAD_SUMS) {
    return o_.stage - 1;
  }
  // Flat indices (stage_grid.h): the tied partner is the other end of this stage's replica.
  if (kind == v1::TENSOR_KIND_WEIGHT_GRAD || kind == v1::TENSOR_KIND_TIED_ROUND) {
    return o_.tied_stage;
  }
  return o_.stage + 1;
}

void StageExchange::NoteMicrobatchCompute(double seconds) {
  budget_seconds_ = budget_seconds_ == 0 ? 2 * seconds : 0.8 * budget_seconds_ + 0.4 * seconds;
}

void StageExchange::SetScheduleBudgets(double activations, double gradients) {
  auto clean = [](double v) { return std::isfinite(v) && v > 0 ? std::min(v, 3600.0) : 0.0; };
  schedule_budget_[0] = clean(activations);
  schedule_budget_[1] = clean(gradients);
}

Status StageExchange::Send(To to, v1::TensorKind kind, uint64_t step, int mb, const float* host,
                           size_t n, std::vector<int64_t> shape, bool adaptive,
                           const float* device) {
  // One tensor in flight (also one left pending because the link's queue was full): sends keep
  // their order.
  RETURN_IF_ERROR(FinishPendingSend());
  ASSIGN_OR_RETURN(LinkSender * sender, SenderFor(to, kind));
  OutboundUsage* usage = UsageOf(to);
  // Activations (to the next stage) and gradients (to the previous) have their own ladders;
  // anything else is sent exactly, fp32 being every ladder's first rung.
  Direction& direction = DirectionOf(to);
  const compression::Controller& controller = *direction.controller;
  int rung = 0;  // fp32: exact
  std::string reason = "exact (not an activation or gradient)";
  if (adaptive) {
    if (direction.fixed_rung >= 0) {
      rung = direction.fixed_rung;
      reason = std::string("compression ") + CompressionModeName(o_.compression) + ": " +
               controller.name(rung);
    } else {
      compression::ControllerState* state = &direction.state;
      const v1::LinkEstimate e = o_.monitor->Outbound(usage->to_site);
      compression::ControllerInput in;
      in.bandwidth_bytes_per_second = e.bandwidth_bytes_per_second();
      // Transfers are pipelined (several in flight, queued behind compute), so what a tensor
      // costs the link is its serialisation time; the round trip only delays the pipeline
      // once, at fill, and no codec can shorten it.
      in.rtt_seconds = 0;
      in.tensor_bytes = n * sizeof(float);
      // The coordinator's budget for this link, priced on the running schedule's critical
      // path; before its first decision, a microbatch's compute.
      const double scheduled = schedule_budget_[to == To::kPrev ? 1 : 0];
      in.budget_seconds = scheduled > 0 ? scheduled : budget_seconds_ > 0 ? budget_seconds_ : 0.05;
      in.quality_floor = direction.quality_floor;
      in.now_seconds = o_.file_env->NowSeconds();
      ASSIGN_OR_RETURN(auto d, controller.Decide(in, *state));
      *state = d.next;
      rung = d.rung;
      reason = d.explanation;
    }
  }
  // What is not adaptive travels exactly, whatever a direction's ladder starts with.
  const compression::CodecSpec spec = adaptive ? controller.spec(rung) : fp32_;
  compression::EncodeOptions eo;
  eo.seed = step * 1000003 + mb * 31 + kind;
  // The frame's envelope, once the payload is encoded, and what the link's usage counts once
  // the tensor is queued.
  auto envelope = [this, kind, step, mb](OutgoingTensor* t) {
    Envelope(kind, step, mb, &t->header);
  };
  auto count = [this, usage, n, adaptive, name = controller.name(rung), reason](uint64_t wire,
                                                                                bool on_device) {
    MutexLock lock(mu_);
    if (adaptive) {
      usage->codec = name;
      usage->reason = reason;
    }
    ++usage->tensors;
    if (on_device) ++usage->device_tensors;
    usage->raw_bytes += n * sizeof(float);
    usage->wire_bytes += wire;
  };
  if (device != nullptr && encoder_ && encoder_->Supports(spec)) {
    RETURN_IF_ERROR(encoder_->Start(spec, device, n, eo));
    if (!encode_logged_ && o_.log) {
      encode_logged_ = true;
      o_.log->info("job {}: stage {} encodes on {} before the copy to the host ({})", o_.job_id,
                   o_.stage, o_.ops->name(), controller.name(rung));
    }
    pending_.emplace(PendingSend{});
    pending_->to = sender;
    pending_->frame = [this, spec, shape, n, envelope](OutgoingTensor* t) -> Status {
      bool finished = false;
      const Status framed = compression::EncodeFrameWith(
          spec, shape, n,
          [&](std::vector<uint8_t>* out) {
            finished = true;
            return encoder_->Finish(out);
          },
          &t->payload);
      if (!finished) {  // the frame failed before its payload: end the copy all the same
        std::vector<uint8_t> discard;
        (void)encoder_->Finish(&discard);
      }
      RETURN_IF_ERROR(framed);
      envelope(t);
      return absl::OkStatus();
    };
    pending_->count = [count](uint64_t wire) { count(wire, true); };
    return absl::OkStatus();
  }
  if (device != nullptr) {  // fp32 or a codec the GPU lacks: the floats come to the host
    o_.ops->Download(host_buf_.data(), device, n);
    host = host_buf_.data();
  }
  OutgoingTensor t;
  ASSIGN_OR_RETURN(auto codec, compression::MakeCodec(spec));
  RETURN_IF_ERROR(compression::EncodeFrame(*codec, {host, n}, shape, eo, &t.payload));
  envelope(&t);
  const uint64_t wire = t.payload.size();
  RETURN_IF_ERROR(sender->Enqueue(std::move(t)));
  count(wire, false);
  return absl::OkStatus();
}

Status StageExchange::FinishPendingSend(bool wait) {
  if (!pending_) return absl::OkStatus();
  const double start = o_.file_env->NowSeconds();
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
  if (wait) send_seconds_ += o_.file_env->NowSeconds() - start;
  return s;
}

Status StageExchange::SendError() const {
  for (const LinkSender* sender : {o_.to_prev, o_.to_next, o_.to_tied}) {
    if (sender == nullptr) continue;
    RETURN_IF_ERROR(sender->error());
  }
  return absl::OkStatus();
}

StatusOr<std::vector<uint8_t>> StageExchange::ReceiveFrame(v1::TensorKind kind, uint64_t step,
                                                           int mb) {
  const TensorKey key{o_.attempt, step, static_cast<uint32_t>(mb), kind, kMainTensor};
  ASSIGN_OR_RETURN(ReceivedTensor t, Wait(key));
  return std::move(t.payload);
}

StatusOr<ReceivedTensor> StageExchange::Wait(const TensorKey& key) {
  auto stopped = [this] { return o_.stop != nullptr && o_.stop->load(); };
  if (stopped()) return absl::AbortedError("stopped");
  const double start = o_.file_env->NowSeconds(), sending = send_seconds_;
  StatusOr<ReceivedTensor> t = o_.inbox->Take(key, 0);
  if (!t.ok() && t.status().code() == absl::StatusCode::kDeadlineExceeded) {
    RETURN_IF_ERROR(FinishPendingSend());  // not here yet: nothing stays pending while waiting
    const int from = FromStage(static_cast<v1::TensorKind>(key.kind));
    double next_check = start + o_.lost_grace_seconds;
    while (true) {
      if (stopped()) return absl::AbortedError("stopped");
      // A tensor of ours the neighbour refused means it will not answer: fail now, naming it.
      RETURN_IF_ERROR(SendError());
      if (o_.peer_status && o_.file_env->NowSeconds() >= next_check) {
        const PeerStatus p = o_.peer_status(from);
        if (p == PeerStatus::kGone) {
          return absl::UnavailableError("job " + o_.job_id + " stage " + std::to_string(o_.stage) +
                                        ": waiting for " + key.DebugString() + " from stage " +
                                        std::to_string(from) +
                                        ", which is gone (it stopped, or its site does not "
                                        "answer or no longer runs it in attempt " +
                                        std::to_string(o_.attempt) + ")");
        }
        // Not known yet: asked again after a heartbeat, not a whole grace.
        next_check = o_.file_env->NowSeconds() +
                     (p == PeerStatus::kStarting ? o_.heartbeat_seconds : o_.lost_grace_seconds);
      }
      t = o_.inbox->Take(key, o_.heartbeat_seconds);
      if (t.ok() || t.status().code() != absl::StatusCode::kDeadlineExceeded) break;
    }
  }
  wait_seconds_ += o_.file_env->NowSeconds() - start - (send_seconds_ - sending);
  return t;
}

Status StageExchange::Receive(v1::TensorKind kind, uint64_t step, int mb, float* host, size_t n,
                              float* device, bool* on_device) {
  const TensorKey key{o_.attempt, step, static_cast<uint32_t>(mb), kind, kMainTensor};
  StatusOr<ReceivedTensor> t = Wait(key);
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
  if (device != nullptr && decoder_ && decoder_->Supports(header.spec)) {
    RETURN_IF_ERROR(
        compression::DecodeFramePayload(header, t->payload, [&](std::span<const uint8_t> payload) {
          return decoder_->Decode(header.spec, payload, n, device);
        }));
    *on_device = true;
    if (!decode_logged_ && o_.log) {
      decode_logged_ = true;
      o_.log->info("job {}: stage {} decodes on {} after the copy from the host ({})", o_.job_id,
                   o_.stage, o_.ops->name(), header.spec.ToString());
    }
    return absl::OkStatus();
  }
  return compression::DecodeFrameValues(header, t->payload, {host, n});
}

std::vector<OutboundUsage> StageExchange::Usage(bool tied) const {
  std::vector<OutboundUsage> out;
  MutexLock lock(mu_);
  if (o_.to_prev) {
    out.push_back(prev_usage_);
    out.back().send_seconds = o_.to_prev->stats().send_seconds;
  }
  if (o_.to_next) {
    out.push_back(next_usage_);
    out.back().send_seconds = o_.to_next->stats().send_seconds;
  }
  if (tied && o_.to_tied) out.push_back(tied_usage_);
  return out;
}

void StageExchange::ReleaseDevice() {
  pending_.reset();
  encoder_.reset();
  decoder_.reset();
  host_buf_ = {};
}

}  // namespace longhaul::daemon
