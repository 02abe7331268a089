// StageExchange: what one stage of a job attempt sends to its neighbours and receives from
// them. Outbound, per tensor: the codec (the link's controller picks it from the measured
// rate, within the job's floor; fixed or exact when the job says so), encoding on the GPU
// before the copy to the host when the device has the codec, or on the host; the one pending
// send whose device work overlaps the next compute; the usage of each link; the senders'
// failures. Inbound: waiting for a tensor in the job's inbox (checking its own senders once
// per heartbeat meanwhile, so a refused send stops the stage, naming the peer) and decoding
// it on the device or into host memory, after checking its size against what the stage
// expects. The stage runner (stage_runner.h) drives it in the 1F1B order.
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/file_env.h"
#include "common/mutex.h"
#include "common/status.h"
#include "compression/controller.h"
#include "compression/device_encoder.h"
#include "daemon/job/exchange/inbox.h"
#include "daemon/job/exchange/sender.h"
#include "daemon/job/spec/job_spec.h"
#include "daemon/link_monitor.h"
#include "kernels/ops.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

// Per outbound link: what the controller chose and what crossed.
struct OutboundUsage {
  std::string to_site;
  std::string codec;
  std::string reason;
  uint64_t tensors = 0, raw_bytes = 0, wire_bytes = 0;
  uint64_t device_tensors = 0;  // of `tensors`, encoded on the device
  double send_seconds = 0;
};

// How a peer stage stands, as far as this stage can tell (StageRunner::PeerStatusOf, from
// pings of its site): running this attempt (or finished it); not known yet (its site has not
// answered a few times in a row yet, or runs no stage of this attempt yet within a start-up
// grace: its assignment may be on the way); or gone (it ran this attempt and stopped, runs a
// later one, or its site stopped answering or runs no stage of this attempt long after it
// started).
enum class PeerStatus { kRunning, kStarting, kGone };

struct StageExchangeOptions {
  std::string site;
  std::string job_id;
  uint32_t attempt = 0;
  int stage = 0, num_stages = 1;  // flat index (stage_grid.h); stages per replica
  // The tied-embedding partner's flat index (StageGrid::tied: the other end of this stage's
  // replica, whose stages need not start at a multiple of num_stages); -1: none.
  int tied_stage = -1;
  CompressionMode compression = CompressionMode::kAdaptive;
  // Each direction's ladder, floor (kAdaptive) and codec (kFixed): activations go to the
  // next stage, their gradients to the previous one (JobSpec::DirectionCodecs, resolved).
  JobSpec::DirectionCodecs activations = {compression::ControllerOptions().ladder, "q8", "q4"};
  JobSpec::DirectionCodecs gradients = {compression::ControllerOptions().ladder, "q8", "q4"};
  LinkMonitor* monitor = nullptr;
  std::shared_ptr<spdlog::logger> log;
  Inbox* inbox = nullptr;
  double heartbeat_seconds = 1.0;
  const std::atomic<bool>* stop = nullptr;  // the stage's stop flag: waits end when it is set
  // The neighbours (null at the ends of the pipeline) and, for the first and last stage of a
  // multi-stage job, the tied-embedding link between them; with their sites.
  LinkSender* to_prev = nullptr;
  LinkSender* to_next = nullptr;
  LinkSender* to_tied = nullptr;
  std::string prev_site, next_site, tied_site;
  std::string tied_codec = "exact";  // the job's compression.tied: what the tied link carries
  kernels::Ops* ops = nullptr;       // the stage's (first) backend: downloads, and its name in logs
  std::unique_ptr<compression::DeviceEncoder> encoder;  // null: encode on the host
  std::unique_ptr<compression::DeviceDecoder> decoder;  // null: decode on the host
  size_t host_floats = 0;  // the largest tensor staged through host memory
  // The clock (NowSeconds) of the wait and send times and of the codec controllers' windows.
  FileEnv* file_env = FileEnv::Default();
  // Asked of the stage a wait is for once it has waited lost_grace_seconds, then every
  // lost_grace_seconds (every heartbeat while the answer is kStarting): kGone ends the wait
  // with Unavailable. Null: never asked (the coordinator stops a stage whose neighbour is
  // gone; a gossip job's stages may have to see it themselves).
  std::function<PeerStatus(int stage)> peer_status;
  double lost_grace_seconds = 5;
};

class StageExchange {
 public:
  enum class To { kPrev, kNext, kTied };

  static StatusOr<std::unique_ptr<StageExchange>> Create(StageExchangeOptions options);

  // Encodes and queues `n` floats for `to`; `adaptive` lets the controller pick the codec
  // (else fp32). The floats are at `host`, or, with `device`, in the backend's memory: encoded
  // there when the GPU has the codec (only encoded bytes cross PCIe), else first downloaded
  // into host_buffer(). Encoded on the GPU, the tensor is left pending: its bytes are still
  // being copied to the host. FinishPendingSend(false), called once the stage has queued its
  // next compute, frames it and queues it if the link's queue has room (so the copy and the
  // frame's assembly overlap that compute, and a full link does not count as compute);
  // FinishPendingSend() finishes it whatever it takes: after that compute, before the stage
  // waits for a tensor that is not there yet, before the next Send, and at the end of the
  // step's passes.
  Status Send(To to, v1::TensorKind kind, uint64_t step, int mb, const float* host, size_t n,
              std::vector<int64_t> shape, bool adaptive, const float* device = nullptr);
  Status FinishPendingSend(bool wait = true);
  // Queues a frame already encoded (the tied-embedding exchange's, model/tied_exchange.h) of
  // `n` floats for `to`.
  Status SendFrame(To to, v1::TensorKind kind, uint64_t step, int mb, std::vector<uint8_t> frame,
                   size_t n);

  // Waits for a tensor and decodes it into `host` (exactly n floats); or, with `device`
  // (backend memory of n floats) and a codec the device decoder takes, into `device`, and sets
  // *on_device.
  Status Receive(v1::TensorKind kind, uint64_t step, int mb, float* host, size_t n,
                 float* device = nullptr, bool* on_device = nullptr);
  // Waits for a tensor and returns its payload as it came (a frame that is not a compression
  // frame, e.g. a grad-sums frame: the caller decodes and checks it).
  StatusOr<std::vector<uint8_t>> ReceiveFrame(v1::TensorKind kind, uint64_t step, int mb);

  // The first failure of the senders (naming the tensor and the peer), or OK.
  Status SendError() const;

  // Whether tensors are encoded or decoded on the device.
  bool encodes_on_device() const { return encoder_ != nullptr; }
  bool decodes_on_device() const { return decoder_ != nullptr; }
  // Host memory of host_floats floats for tensors staged through the host.
  float* host_buffer() { return host_buf_.data(); }

  // The compute of one microbatch (forward and backward), the controller's time budget for a
  // tensor: smoothed over microbatches.
  void NoteMicrobatchCompute(double seconds);
  // The coordinator's budgets for the next step (StepDecision.act_budgets / grad_budgets:
  // priced on the step's critical path, daemon/job/coordinator/step_schedule.h); a value that is
  // not positive and finite leaves that direction on the compute budget.
  void SetScheduleBudgets(double activations, double gradients);
  // Seconds spent waiting for tensors, and in FinishPendingSend(wait), since the start.
  double wait_seconds() const { return wait_seconds_; }
  double send_seconds() const { return send_seconds_; }

  // Each outbound link's usage: the neighbours (previous first), then, with `tied`, the
  // tied-embedding link. Safe from any thread.
  std::vector<OutboundUsage> Usage(bool tied) const ABSL_LOCKS_EXCLUDED(mu_);

  // Drops a pending send and the device codecs (before the backend goes away); usage stays.
  void ReleaseDevice();

 private:
  explicit StageExchange(StageExchangeOptions options);
  LinkSender* Sender(To to) const;
  // Sender(to), or an error naming the stage and the tensor's kind when there is none.
  StatusOr<LinkSender*> SenderFor(To to, v1::TensorKind kind) const;
  // Takes the tensor of `key` from the inbox, waiting while it is not there (failing on a
  // stop or a refused send of ours); the wait counts in wait_seconds.
  StatusOr<ReceivedTensor> Wait(const TensorKey& key);
  // The routing header of a tensor this stage sends.
  void Envelope(v1::TensorKind kind, uint64_t step, int mb, v1::TensorFrame* h) const;
  // The usage of the link to `to`: only its address, taken without mu_; what it points to is
  // guarded by mu_ (but to_site, set by the constructor).
  OutboundUsage* UsageOf(To to);
  // The flat stage a tensor of `kind` comes from (the reverse of ToStage).
  int FromStage(v1::TensorKind kind) const;
  int ToStage(v1::TensorKind kind) const;

  StageExchangeOptions o_;
  std::unique_ptr<compression::DeviceEncoder> encoder_;
  std::unique_ptr<compression::DeviceDecoder> decoder_;
  // One per direction: [0] activations (to the next stage), [1] gradients (to the previous).
  struct Direction {
    std::unique_ptr<compression::Controller> controller;
    int quality_floor = 0;
    int fixed_rung = -1;  // >= 0: compression off or fixed
    compression::ControllerState state;
  };
  Direction directions_[2];
  compression::CodecSpec fp32_;  // targets, tokens and the exact tied exchange
  Direction& DirectionOf(To to) { return directions_[to == To::kPrev ? 1 : 0]; }
  double budget_seconds_ = 0;
  double schedule_budget_[2] = {0, 0};  // by direction, as directions_; 0: none
  std::vector<float> host_buf_;
  bool encode_logged_ = false, decode_logged_ = false;
  struct PendingSend {  // see Send
    LinkSender* to = nullptr;
    std::function<Status(OutgoingTensor*)> frame;  // null once framed into `tensor`
    OutgoingTensor tensor;
    std::function<void(uint64_t wire_bytes)> count;  // the link's usage, once queued
  };
  std::optional<PendingSend> pending_;
  double wait_seconds_ = 0, send_seconds_ = 0;  // the stage's thread only

  mutable Mutex mu_;  // guards the usage
  OutboundUsage prev_usage_ ABSL_GUARDED_BY(mu_);
  OutboundUsage next_usage_ ABSL_GUARDED_BY(mu_);
  OutboundUsage tied_usage_ ABSL_GUARDED_BY(mu_);
};

}  // namespace longhaul::daemon
