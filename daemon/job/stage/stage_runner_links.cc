// StageRunner's exchange with its pipeline neighbours and tied-embedding partner
// (stage_exchange.h): its options from the assignment (the sites of the stages next to this
// one in its replica, the job's compression), and the device codecs: a GPU stage with one
// backend encodes outgoing tensors and decodes incoming ones on the device.
#include <algorithm>

#include "compression/codec.h"
#include "daemon/job/stage/stage_runner.h"

namespace longhaul::daemon {

Status StageRunner::InitExchange(kernels::Ops* ops) {
  const v1::StageAssignment& a = ctx_.assignment;
  StageExchangeOptions xo;
  xo.site = ctx_.site;
  xo.job_id = a.job_id();
  xo.attempt = a.attempt();
  xo.stage = stage_;
  xo.num_stages = num_stages_;
  xo.compression = ctx_.spec.compression;
  // Activations go out at this stage's end, gradients at its begin.
  const model::ModelConfig& m = ctx_.spec.job.model;
  const auto& me = a.stages(stage_);
  xo.activations = ResolvedCodecs(ctx_.spec, /*gradients=*/false,
                                  model::CoordinateBoundary(m, static_cast<int>(me.layer_end())));
  xo.gradients = ResolvedCodecs(ctx_.spec, /*gradients=*/true,
                                model::CoordinateBoundary(m, static_cast<int>(me.layer_begin())));
  xo.monitor = ctx_.monitor;
  xo.log = ctx_.log;
  xo.inbox = ctx_.inbox;
  xo.heartbeat_seconds = ctx_.heartbeat_seconds;
  xo.stop = &stop_;
  xo.to_prev = ctx_.to_prev.get();
  xo.to_next = ctx_.to_next.get();
  xo.to_tied = ctx_.to_tied.get();
  if (grid_.prev(stage_) >= 0) xo.prev_site = a.stages(grid_.prev(stage_)).site();
  if (grid_.next(stage_) >= 0) xo.next_site = a.stages(grid_.next(stage_)).site();
  xo.tied_stage = grid_.tied(stage_);
  if (grid_.tied(stage_) >= 0) {
    xo.tied_site = a.stages(grid_.tied(stage_)).site();
    xo.tied_codec = ctx_.spec.tied_codec;
    ASSIGN_OR_RETURN(tied_codec_, model::TiedGradCodec::Create(ctx_.spec.tied_codec));
  }
  xo.ops = ops;
  if (ops_.size() == 1) {
    ASSIGN_OR_RETURN(compression::DeviceCodecs codecs, ctx_.env.device_codecs(ops));
    xo.encoder = std::move(codecs.encoder);
    xo.decoder = std::move(codecs.decoder);
  }
  xo.host_floats = static_cast<size_t>(B_) * T_ * std::max(in_width_, out_width_);
  xo.file_env = ctx_.env.files;
  if (ctx_.spec.sync.reduce == fleet::SyncReduce::kGossip && grid_.replicas > 1) {
    // Without the coordinator in its steps, a gossip stage sees a neighbour's site go itself:
    // it stops, and the other replicas' rounds go on without its replica (sync_exchange.h).
    xo.peer_status = [this](int stage) { return PeerStatusOf(stage); };
    xo.lost_grace_seconds = 5 * ctx_.heartbeat_seconds;
  }
  ASSIGN_OR_RETURN(exchange_, StageExchange::Create(std::move(xo)));
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
