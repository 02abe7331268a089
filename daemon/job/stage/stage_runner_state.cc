// StageRunner's durable state: checkpoints of the fragment and optimizer at committed steps,
// the layer moves of a re-plan (parameters and optimizer state fetched from the sites that
// held them, checked chunk by chunk), and a dropped replica's rejoin (the same from the live
// replica's stages holding its layers, however that replica is split, with its outer-step
// state).
#include <algorithm>
#include <filesystem>

#include "common/layer_range.h"
#include "daemon/job/stage/stage_runner.h"
#include "daemon/job/state/fragment_slices.h"
#include "daemon/job/state/stage_checkpoint.h"
#include "model/layout.h"

namespace longhaul::daemon {
namespace {

// Copies the tensors (and layers of per-layer tensors) that both fragments hold from `from`'s
// flat array into `to`'s.
void CopyOverlap(const model::FragmentLayout& from, const float* src,
                 const model::FragmentLayout& to, float* dst) {
  for (int i = 0; i < model::kNumTensors; ++i) {
    const auto t = static_cast<model::Tensor>(i);
    if (!from.has(t) || !to.has(t)) continue;
    if (!model::IsPerLayer(t)) {
      std::copy_n(src + from.offset(t), from.size(t), dst + to.offset(t));
      continue;
    }
    for (int l = std::max(from.begin(), to.begin()); l < std::min(from.end(), to.end()); ++l) {
      std::copy_n(src + from.offset(t, l), from.model().slice_size(t, l), dst + to.offset(t, l));
    }
  }
}

}  // namespace

Status StageRunner::Migrate(const google::protobuf::RepeatedPtrField<v1::StageInfo>& old_plan,
                            uint64_t step) {
  const model::ModelConfig& config = ctx_.spec.job.model;
  const model::FragmentLayout& mine = fragment_->layout();
  const size_t total = model::NumParameters(config);
  std::vector<float> params(total), m(total), v(total);
  std::string loader_state;
  for (const auto& old : old_plan) {
    const int b = static_cast<int>(old.layer_begin()), e = static_cast<int>(old.layer_end());
    const bool old_first = b == 0, old_last = e == config.num_layers;
    const bool overlaps = b < mine.end() && mine.begin() < e;
    if (!overlaps && !(mine.is_first() && old_first) && !(mine.is_last() && old_last)) continue;
    transport::Link* ch = ctx_.channel ? ctx_.channel(old.site()) : nullptr;
    if (!ch) return absl::UnavailableError("cannot reach site '" + old.site() + "' for its layers");
    model::FragmentLayout layout(config, b, e);
    FragmentArray flat[3];
    for (auto& f : flat) f.values.resize(layout.total());
    bool got_loader = false;
    v1::FetchFragmentRequest req;
    req.set_job_id(ctx_.assignment.job_id());
    req.set_step(step);
    req.set_include_state(true);
    req.set_layer_begin(b);
    req.set_layer_end(e);
    RETURN_IF_ERROR(ch->FetchFragment(req, [&](transport::WireTensor t) -> Status {
      if (stop_) return absl::CancelledError("stage stopped during a layer move");
      const v1::TensorFrame& f = t.header;
      if (f.kind() == v1::TENSOR_KIND_LOADER_STATE) {
        ASSIGN_OR_RETURN(std::string text, OpenLoaderState(t.payload, old.site()));
        if (old_first) loader_state = std::move(text);
        got_loader = true;
        return absl::OkStatus();
      }
      int which = -1;
      if (f.kind() == v1::TENSOR_KIND_PARAMETERS && f.tensor_id() == 0) which = 0;
      if (f.kind() == v1::TENSOR_KIND_OPTIMIZER_STATE && (f.tensor_id() == 1 || f.tensor_id() == 2))
        which = static_cast<int>(f.tensor_id());
      if (which < 0) {
        return absl::DataLossError("layer move from " + old.site() + ": unexpected " +
                                   v1::TensorKind_Name(f.kind()) + " tensor " +
                                   std::to_string(f.tensor_id()));
      }
      return PlaceSlice(t, &flat[which], old.site());
    }));
    for (int k = 0; k < 3; ++k) {
      RETURN_IF_ERROR(CheckComplete(flat[k], old.site(), k == 0 ? "parameters" : "AdamW moments"));
    }
    if (old_first && !got_loader) {
      return absl::DataLossError("layer move from " + old.site() + ": no data loader state");
    }
    layout.InsertIntoModel(flat[0].values.data(), params.data());
    layout.InsertIntoModel(flat[1].values.data(), m.data());
    layout.InsertIntoModel(flat[2].values.data(), v.data());
  }
  std::vector<float> p(mine.total()), mm(mine.total()), vv(mine.total());
  mine.ExtractFromModel(params.data(), p.data());
  mine.ExtractFromModel(m.data(), mm.data());
  mine.ExtractFromModel(v.data(), vv.data());
  fragment_->SetParameters(p.data());
  fragment_->SetOptimizerState(mm.data(), vv.data());
  if (loader_) {
    ASSIGN_OR_RETURN(auto ls, model::DataLoaderState::Parse(loader_state));
    RETURN_IF_ERROR(loader_->Restore(ls));
  }
  ctx_.log->info("job {}: stage {} took over layers {} at step {}", ctx_.assignment.job_id(),
                 stage_, LayerRange(mine.begin(), mine.end()), step);
  // Checkpoint here at once: a rollback to this step must find the state on this site.
  return Checkpoint(step);
}

Status StageRunner::RestoreLoaderAt(uint64_t step, const std::string& state,
                                    const std::string& from) {
  ASSIGN_OR_RETURN(model::DataLoaderState ls, model::DataLoaderState::Parse(state));
  const model::DataLoaderState own = loader_->state();
  if (ls.shards == own.shards && ls.shard_block == own.shard_block && ls.round == own.round &&
      ls.offset == own.offset && ls.shard == own.shard) {
    return loader_->Restore(ls);
  }
  // Cut differently (another replica's shard, this one's with other microbatches: sync mode
  // step's redistribution after a drop or a rejoin, or the data cut into more or fewer shards
  // since sites joined or left the job): step `step` of this shard, of its own block each.
  if (ls.shard_block <= 0 || ls.position / ls.shard_block != static_cast<int64_t>(step) ||
      ls.position % ls.shard_block != 0) {
    return absl::DataLossError(from + ": data loader state '" + state + "' is not step " +
                               std::to_string(step) + " of a shard of " +
                               std::to_string(own.shards));
  }
  ls.position = static_cast<int64_t>(step) * own.shard_block;
  ls.shards = own.shards;
  ls.shard = own.shard;
  ls.shard_block = own.shard_block;
  ls.round = own.round;
  ls.offset = own.offset;
  return loader_->Restore(ls);
}

Status StageRunner::Rejoin(uint64_t step) {
  const v1::StageAssignment& a = ctx_.assignment;
  const int source = static_cast<int>(a.rejoin_source());
  if (source < 0 || source >= grid_.replicas || source == grid_.replica(stage_)) {
    return absl::InvalidArgumentError("job " + a.job_id() + ": no replica " +
                                      std::to_string(source) + " to rejoin from");
  }
  const model::ModelConfig& config = ctx_.spec.job.model;
  const bool local = replicas_ != nullptr && replicas_->local();
  // The outer step's state comes too, but not a gossip replica's: it starts its rounds afresh
  // from the live replica's parameters (ReplicaSync::RestoreOuter).
  const bool outer = local && !replicas_->gossip();
  const model::FragmentLayout& mine = fragment_->layout();
  // Parameters, m, v, and (local mode) the outer step's anchor and momentum. The source
  // replica may be split differently: this stage's layers come from each of its stages that
  // holds some of them, copied slice by slice (the embedding from a stage at an end).
  std::vector<float> part[5];
  for (auto& p : part) p.resize(static_cast<size_t>(mine.total()));
  std::string loader_state, sites;
  for (int i = grid_.start[source]; i < grid_.start[source + 1]; ++i) {
    const v1::StageInfo& from = a.stages(i);
    const int b = static_cast<int>(from.layer_begin()), e = static_cast<int>(from.layer_end());
    const bool overlaps = b < mine.end() && mine.begin() < e;
    if (!overlaps && !(mine.is_first() && b == 0) && !(mine.is_last() && e == config.num_layers)) {
      continue;
    }
    const std::string& site = from.site();
    transport::Link* ch = ctx_.channel ? ctx_.channel(site) : nullptr;
    if (!ch) return absl::UnavailableError("cannot reach site '" + site + "' to rejoin from");
    const model::FragmentLayout layout(config, b, e);
    FragmentArray flat[5];
    for (auto& f : flat) f.values.resize(layout.total());
    v1::FetchFragmentRequest req;
    req.set_job_id(a.job_id());
    req.set_step(step);
    req.set_include_state(true);
    req.set_include_sync_state(outer);
    req.set_layer_begin(static_cast<uint32_t>(b));
    req.set_layer_end(static_cast<uint32_t>(e));
    RETURN_IF_ERROR(ch->FetchFragment(req, [&](transport::WireTensor t) -> Status {
      if (stop_) return absl::CancelledError("stage stopped during a rejoin");
      const v1::TensorFrame& f = t.header;
      if (f.kind() == v1::TENSOR_KIND_LOADER_STATE) {
        ASSIGN_OR_RETURN(std::string text, OpenLoaderState(t.payload, site));
        if (b == 0) loader_state = std::move(text);  // the source's first stage reads its data
        return absl::OkStatus();
      }
      int which = -1;
      if (f.kind() == v1::TENSOR_KIND_PARAMETERS && f.tensor_id() == 0) which = 0;
      if (f.kind() == v1::TENSOR_KIND_OPTIMIZER_STATE && f.tensor_id() >= 1 && f.tensor_id() <= 4)
        which = static_cast<int>(f.tensor_id());
      if (which < 0 || (which >= 3 && !outer)) {
        return absl::DataLossError("rejoin from " + site + ": unexpected " +
                                   v1::TensorKind_Name(f.kind()) + " tensor " +
                                   std::to_string(f.tensor_id()));
      }
      return PlaceSlice(t, &flat[which], site);
    }));
    const char* what[] = {"parameters", "AdamW m", "AdamW v", "outer anchor", "outer momentum"};
    for (int k = 0; k < (outer ? 5 : 3); ++k) {
      RETURN_IF_ERROR(CheckComplete(flat[k], site, what[k]));
      CopyOverlap(layout, flat[k].values.data(), mine, part[k].data());
    }
    sites += (sites.empty() ? "" : ", ") + site;
  }
  if (sites.empty()) {
    return absl::InvalidArgumentError("job " + a.job_id() + ": replica " + std::to_string(source) +
                                      " holds none of layers " +
                                      LayerRange(mine.begin(), mine.end()));
  }
  // Local mode: the live replicas' state at their last outer step, the anchor (their
  // parameters, at a sync step); the inner steps since then are theirs, not this replica's.
  // Staggered, no step is every phase's sync step: the live replica's parameters, so that at
  // each phase's next sync this replica's pseudo-gradient is the live one's up to the rejoin
  // and its own since (a clone at this step, weighed as any replica). Gossip keeps no anchor:
  // the live replica's parameters, with weight 1 (ReplicaSync::RestoreOuter).
  const bool from_anchor =
      local && ctx_.spec.sync.stagger <= 1 && ctx_.spec.sync.reduce != fleet::SyncReduce::kGossip;
  fragment_->SetParameters(from_anchor ? part[3].data() : part[0].data());
  fragment_->SetOptimizerState(part[1].data(), part[2].data());
  if (loader_) {
    if (loader_state.empty()) {
      return absl::DataLossError("rejoin from " + sites + ": no data loader state");
    }
    // The live replica's position in its shard is this replica's in its own: the same steps.
    RETURN_IF_ERROR(RestoreLoaderAt(step, loader_state, "rejoin from " + sites));
  }
  if (local) RETURN_IF_ERROR(replicas_->RestoreOuter(std::move(part[3]), std::move(part[4])));
  ctx_.log->info("job {}: stage {} (replica {}) rejoined at step {} from replica {} ({})",
                 a.job_id(), stage_, grid_.replica(stage_), step, source, sites);
  // Checkpoint here at once: a rollback to this step must find the state on this site.
  return Checkpoint(step);
}

Status StageRunner::Checkpoint(uint64_t step) {
  RETURN_IF_ERROR(CheckpointSync(step));  // first: a stage checkpoint implies its sync state
  StageState s;
  s.step = step;
  const auto& me = ctx_.assignment.stages(stage_);
  s.layer_begin = static_cast<int>(me.layer_begin());
  s.layer_end = static_cast<int>(me.layer_end());
  const size_t n = fragment_->layout().total();
  s.params.resize(n);
  s.m.resize(n);
  s.v.resize(n);
  fragment_->GetParameters(s.params.data());
  fragment_->GetOptimizerState(s.m.data(), s.v.data());
  if (loader_) s.loader_state = loader_->state().Serialize();
  RETURN_IF_ERROR(WriteStageState(
      *ctx_.env.files, StageCheckpointPath(ctx_.job_dir, step, s.layer_begin, s.layer_end), s));
  MutexLock lock(mu_);
  status_.checkpoint_step = step;
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
