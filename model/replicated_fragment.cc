// ReplicatedFragment; see replicated_fragment.h.
#include "model/replicated_fragment.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/init.h"

namespace longhaul::model {

namespace {

bool AnyBound(const FragmentOptions& o) {
  return std::any_of(o.layer_modes.begin(), o.layer_modes.end(), ShardsGradients);
}

// Replica i's fragment options (of R, taking `rows` rows): the layers' modes where there are
// replicas to shard over, and, sharded, its part of the held slices' AdamW state.
FragmentOptions ReplicaOptions(const ModelConfig& config, const FragmentOptions& options, int R,
                               int i, int rows) {
  FragmentOptions o = options;
  o.batch_size = rows;
  o.optimizer_begin = 0;  // the whole state unless sharded here
  o.optimizer_end = -1;
  if (R == 1) o.layer_modes.clear();
  const bool shard = R > 1 && (options.shard_optimizer ||
                               std::any_of(o.layer_modes.begin(), o.layer_modes.end(),
                                           [](ShardMode m) { return m != ShardMode::kReplicate; }));
  o.shard_optimizer = shard;
  if (shard) {
    const int64_t held = Fragment::HeldFloats(config, o);
    o.optimizer_begin = held * i / R;
    o.optimizer_end = held * (i + 1) / R;
  }
  return o;
}

// Replica i's (of R) buffers beyond its fragment, in floats: its part of each zero2 / zero3
// layer's block (0 for the others), and the working buffers: the largest such layer's whole
// gradient, and the largest zero3 layer's parameters (two of those). `o`: the replica's
// options (ReplicaOptions).
struct PartSizes {
  std::vector<int64_t> part;  // by layer - begin
  int64_t layer_grad = 0, gathered = 0;
};

PartSizes PartSizesOf(const ModelConfig& config, const FragmentOptions& o, int R, int i) {
  PartSizes s;
  if (!o.training || !AnyBound(o)) return s;
  const FragmentLayout layout(config, o.begin, o.end);
  s.part.assign(o.layer_modes.size(), 0);
  for (size_t k = 0; k < o.layer_modes.size(); ++k) {
    const ShardMode m = o.layer_modes[k];
    if (!ShardsGradients(m)) continue;
    const int64_t n = layout.layer_floats(o.begin + static_cast<int>(k));
    s.part[k] = n * (i + 1) / R - n * i / R;
    s.layer_grad = std::max(s.layer_grad, n);
    if (ShardsParameters(m)) s.gathered = std::max(s.gathered, n);
  }
  return s;
}

}  // namespace

std::vector<MemoryReport> ReplicatedFragment::EstimateMemory(const ModelConfig& config,
                                                             const FragmentOptions& options,
                                                             int replicas) {
  std::vector<MemoryReport> out;
  const std::vector<int> rows = ReplicaRows(options.batch_size, replicas);
  for (int i = 0; i < replicas; ++i) {
    const FragmentOptions o = ReplicaOptions(config, options, replicas, i, std::max(1, rows[i]));
    MemoryReport r = Fragment::EstimateMemory(config, o);
    const int64_t f = sizeof(float);
    const PartSizes sizes = PartSizesOf(config, o, replicas, i);
    for (size_t k = 0; k < sizes.part.size(); ++k) {
      r.gradients += sizes.part[k] * f;
      r.optimizer += 2 * sizes.part[k] * f;
      if (ShardsParameters(o.layer_modes[k])) r.parameters += sizes.part[k] * f;
    }
    r.shared += (sizes.layer_grad + 2 * sizes.gathered) * f;  // the working buffers
    r.shared += StagingBytes(config, o);
    out.push_back(r);
  }
  return out;
}

int64_t ReplicatedFragment::StagingBytes(const ModelConfig& config, const FragmentOptions& o) {
  return int64_t(o.batch_size) * o.seq_len *
         std::max(StreamWidth(config, o.begin), StreamWidth(config, o.end)) *
         int64_t(sizeof(float));
}

StatusOr<std::unique_ptr<ReplicatedFragment>> ReplicatedFragment::Create(
    const ModelConfig& config, const FragmentOptions& options,
    std::vector<kernels::Ops*> replicas) {
  const int R = static_cast<int>(replicas.size());
  if (R < 1 || R > options.batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("data parallelism: ", R, " replicas for a microbatch of ", options.batch_size,
                     " sequences (each replica needs at least one; lower the devices or raise "
                     "microbatch_size)"));
  }
  if (!options.layer_modes.empty() &&
      options.layer_modes.size() != static_cast<size_t>(options.end - options.begin)) {
    return absl::InvalidArgumentError(absl::StrCat("data parallelism: ", options.layer_modes.size(),
                                                   " layer sharding modes for layers [",
                                                   options.begin, ", ", options.end, ")"));
  }
  std::unique_ptr<ReplicatedFragment> f(new ReplicatedFragment());
  f->config_ = config;
  f->options_ = ReplicaOptions(config, options, R, 0, options.batch_size);
  f->bound_ = R > 1 && options.training && AnyBound(options);
  const std::vector<int> rows = ReplicaRows(options.batch_size, R);
  int row = 0;
  for (int i = 0; i < R; ++i) {
    Replica r;
    r.ops = replicas[i];
    r.row_begin = row;
    r.rows = rows[i];
    row += r.rows;
    const FragmentOptions o = ReplicaOptions(config, options, R, i, r.rows);
    ASSIGN_OR_RETURN(r.fragment, Fragment::Create(config, o, r.ops));
    // Holds the input activations, and later the output's gradient.
    r.in = r.ops->Alloc(static_cast<size_t>(StagingBytes(config, o)) / sizeof(float));
    // Its parts of the zero2 / zero3 layers, and the working buffers (none unsharded).
    const PartSizes sizes = PartSizesOf(config, o, R, i);
    r.parts.resize(sizes.part.size());
    for (size_t k = 0; k < sizes.part.size(); ++k) {
      LayerPart& p = r.parts[k];
      if (!ShardsGradients(o.layer_modes[k])) continue;
      p.floats = sizes.part[k];
      if (ShardsParameters(o.layer_modes[k])) p.params = r.ops->Alloc(p.floats);
      p.grads = r.ops->Alloc(p.floats);
      p.m = r.ops->Alloc(p.floats);
      p.v = r.ops->Alloc(p.floats);
    }
    r.layer_grad = r.ops->Alloc(sizes.layer_grad);
    if (sizes.gathered > 0) {
      r.gathered[0] = r.ops->Alloc(sizes.gathered);
      r.gathered[1] = r.ops->Alloc(sizes.gathered);
    }
    f->replicas_.push_back(std::move(r));
  }
  ASSIGN_OR_RETURN(f->reducer_, kernels::MakeReplicaReducer(replicas));
  if (f->sharded()) {
    // The collectives on empty parts: a reducer without them refuses here,
    // not after the replicas have stepped their parts.
    std::vector<float*> none(replicas.size(), nullptr);
    const std::vector<size_t> empty(replicas.size() + 1, 0);
    Status s = f->reducer_->AllGather(none, empty);
    if (s.ok() && f->bound_) s = f->reducer_->ReduceScatterSum(none, empty);
    if (!s.ok()) {
      return Status(s.code(), absl::StrCat("sharded state on ", R, " replicas (",
                                           f->reducer_->name(), " reducer): ", s.message()));
    }
  }
  return f;
}

std::vector<ShardMode> ReplicatedFragment::layer_modes() const {
  std::vector<ShardMode> out;
  for (int l = options_.begin; l < options_.end; ++l) {
    const ShardMode m = mode(l);
    out.push_back(ShardsGradients(m) ? m : sharded() ? ShardMode::kZero1 : ShardMode::kReplicate);
  }
  return out;
}

std::vector<size_t> ReplicatedFragment::PartOffsets(int layer) const {
  const int64_t n = layout().layer_floats(layer);
  const int R = num_replicas();
  std::vector<size_t> offsets;
  for (int i = 0; i <= R; ++i) offsets.push_back(static_cast<size_t>(n * i / R));
  return offsets;
}

template <typename Fn>
void ReplicatedFragment::ForEachPiece(int layer, int64_t begin, int64_t end, Fn fn) const {
  const FragmentLayout& lay = layout();
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    if (!IsPerLayer(t)) continue;
    const int64_t at = lay.offset_in_layer(t, layer), n = lay.model().slice_size(t, layer);
    const int64_t b = std::max(begin, at), e = std::min(end, at + n);
    if (b < e) fn(t, b, lay.offset(t, layer) + (b - at), e - b);
  }
}

template <typename Fn>
void ReplicatedFragment::ForEachPartPiece(bool zero3_only, Fn fn) const {
  for (int l = options_.begin; l < options_.end; ++l) {
    if (!(zero3_only ? ShardsParameters(mode(l)) : ShardsGradients(mode(l)))) continue;
    const std::vector<size_t> off = PartOffsets(l);
    for (size_t i = 0; i < replicas_.size(); ++i) {
      const Replica& r = replicas_[i];
      const LayerPart& p = r.parts[static_cast<size_t>(l - options_.begin)];
      ForEachPiece(l, off[i], off[i + 1], [&](Tensor t, int64_t at, int64_t flat, int64_t n) {
        fn(r, p, l, t, at - static_cast<int64_t>(off[i]), flat, n);
      });
    }
  }
}

std::vector<int> ReplicatedFragment::ReplicaRows(int batch_size, int replicas) {
  std::vector<int> rows(static_cast<size_t>(replicas));
  for (int i = 0; i < replicas; ++i) rows[i] = batch_size / replicas + (i < batch_size % replicas);
  return rows;
}

ReplicatedFragment::~ReplicatedFragment() {
  for (auto& r : replicas_) {
    std::vector<float*> owned = {r.in, r.gathered[0], r.gathered[1], r.layer_grad};
    for (const LayerPart& p : r.parts) owned.insert(owned.end(), {p.params, p.grads, p.m, p.v});
    for (float* p : owned) {
      if (p != nullptr) r.ops->Free(p);
    }
  }
}

size_t ReplicatedFragment::RowFloats(bool output) const {
  return static_cast<size_t>(options_.seq_len) *
         (output ? primary().output_width() : primary().input_width());
}

void ReplicatedFragment::InitParameters(uint64_t seed) {
  std::vector<float> host(layout().total());
  InitFragment(layout(), seed, host.data());
  SetParameters(host.data());
}

void ReplicatedFragment::SetParameters(const float* host) {
  for (auto& r : replicas_) r.fragment->SetParameters(host);  // held and zero2 layers
  ForEachPartPiece(true,
                   [&](const Replica& r, const LayerPart& p, int, Tensor, int64_t k, int64_t flat,
                       int64_t n) { r.ops->Upload(p.params + k, host + flat, n); });
}

void ReplicatedFragment::GetParameters(float* host) const {
  primary().GetParameters(host);
  ForEachPartPiece(true,
                   [&](const Replica& r, const LayerPart& p, int, Tensor, int64_t k, int64_t flat,
                       int64_t n) { r.ops->Download(host + flat, p.params + k, n); });
}

void ReplicatedFragment::LoadFromModel(const float* model_params) {
  std::vector<float> host(layout().total());
  layout().ExtractFromModel(model_params, host.data());
  SetParameters(host.data());
}

void ReplicatedFragment::SetOptimizerState(const float* m_host, const float* v_host) {
  for (auto& r : replicas_) r.fragment->SetOptimizerState(m_host, v_host);  // each its part
  ForEachPartPiece(false, [&](const Replica& r, const LayerPart& p, int, Tensor, int64_t k,
                              int64_t flat, int64_t n) {
    r.ops->Upload(p.m + k, m_host + flat, n);
    r.ops->Upload(p.v + k, v_host + flat, n);
  });
}

void ReplicatedFragment::GetOptimizerState(float* m_host, float* v_host) const {
  if (!sharded()) {
    primary().GetOptimizerState(m_host, v_host);
    return;
  }
  for (const auto& r : replicas_) r.fragment->GetOptimizerState(m_host, v_host);  // each its part
  ForEachPartPiece(false, [&](const Replica& r, const LayerPart& p, int, Tensor, int64_t k,
                              int64_t flat, int64_t n) {
    r.ops->Download(m_host + flat, p.m + k, n);
    r.ops->Download(v_host + flat, p.v + k, n);
  });
}

Status ReplicatedFragment::ForwardReplica(Replica& r, int slot, const int32_t* tokens,
                                          const float* activations, bool whole) {
  const size_t first = static_cast<size_t>(r.row_begin);
  // Tokens for the first fragment, and for every fragment of the subspace-cut variant.
  const int32_t* rows = tokens == nullptr ? nullptr : tokens + first * options_.seq_len;
  const float* in = nullptr;
  if (!r.fragment->is_first()) {
    if (activations == nullptr) {
      return absl::InvalidArgumentError("Forward: a fragment after the first needs activations");
    }
    if (activations != r.in) {
      r.ops->Upload(r.in, activations + first * RowFloats(false), r.rows * RowFloats(false));
    }
    in = r.in;
  }
  return whole ? r.fragment->Forward(slot, rows, in) : r.fragment->ForwardBegin(slot, rows, in);
}

Status ReplicatedFragment::Forward(int slot, const int32_t* tokens, const float* activations) {
  // Every replica's work is queued before any result is read back, so GPUs run concurrently.
  for (auto& r : replicas_) {
    RETURN_IF_ERROR(ForwardReplica(r, slot, tokens, activations, /*whole=*/!bound_));
  }
  if (!bound_) return absl::OkStatus();
  // A layer at a time across the replicas, a zero3 layer's parameters gathered first.
  for (int l = options_.begin; l < options_.end; ++l) {
    if (ShardsParameters(mode(l))) RETURN_IF_ERROR(GatherLayer(l));
    for (auto& r : replicas_) r.fragment->ForwardLayer(slot, l);
  }
  for (auto& r : replicas_) r.fragment->ForwardEnd(slot);
  return absl::OkStatus();
}

Status ReplicatedFragment::GatherLayer(int layer) {
  const std::vector<size_t> off = PartOffsets(layer);
  const int buffer = (layer - options_.begin) % 2;
  std::vector<float*> work;
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = replicas_[i];
    float* w = r.gathered[buffer];
    r.ops->Copy(w + off[i], r.parts[static_cast<size_t>(layer - options_.begin)].params,
                off[i + 1] - off[i]);
    work.push_back(w);
  }
  if (Status s = reducer_->AllGather(work, off); !s.ok()) {
    return Status(s.code(), absl::StrCat("gathering layer ", layer, ": ", s.message()));
  }
  for (auto& r : replicas_) r.fragment->BindLayer(layer, r.gathered[buffer], r.layer_grad);
  return absl::OkStatus();
}

void ReplicatedFragment::Output(int slot, float* host) const {
  for (const auto& r : replicas_) {
    r.ops->Download(host + r.row_begin * RowFloats(true), r.fragment->Output(slot),
                    r.rows * RowFloats(true));
  }
}

StatusOr<float> ReplicatedFragment::Loss(int slot, const int32_t* targets) {
  if (replicas_.size() == 1) return replicas_[0].fragment->Loss(slot, targets);
  double sum = 0;
  for (auto& r : replicas_) {
    ASSIGN_OR_RETURN(
        const float loss,
        r.fragment->Loss(slot, targets + static_cast<size_t>(r.row_begin) * options_.seq_len));
    sum += static_cast<double>(loss) * r.rows;
  }
  return static_cast<float>(sum / options_.batch_size);
}

Status ReplicatedFragment::BackwardReplica(Replica& r, int slot, const float* output_grad,
                                           float dloss, bool whole) {
  const float* grad = nullptr;
  if (output_grad != nullptr) {
    if (output_grad != r.in) {
      r.ops->Upload(r.in, output_grad + r.row_begin * RowFloats(true), r.rows * RowFloats(true));
    }
    grad = r.in;
  }
  return whole ? r.fragment->Backward(slot, grad, dloss)
               : r.fragment->BackwardBegin(slot, grad, dloss);
}

Status ReplicatedFragment::Backward(int slot, const float* output_grad, float dloss) {
  for (auto& r : replicas_) {
    RETURN_IF_ERROR(BackwardReplica(r, slot, output_grad, dloss, /*whole=*/!bound_));
  }
  if (!bound_) return absl::OkStatus();
  for (int l = options_.end - 1; l >= options_.begin; --l) {
    const ShardMode m = mode(l);
    if (ShardsParameters(m)) RETURN_IF_ERROR(GatherLayer(l));
    if (ShardsGradients(m)) {
      for (auto& r : replicas_) {
        r.ops->Zero(r.layer_grad, layout().layer_floats(l));
        // (GatherLayer bound a zero3 layer's gradient with its parameters.)
        if (m == ShardMode::kZero2) r.fragment->BindLayer(l, nullptr, r.layer_grad);
      }
    }
    for (auto& r : replicas_) r.fragment->BackwardLayer(slot, l);
    if (ShardsGradients(m)) RETURN_IF_ERROR(ScatterLayerGrad(l));
  }
  for (auto& r : replicas_) r.fragment->BackwardEnd(slot);
  return absl::OkStatus();
}

Status ReplicatedFragment::ScatterLayerGrad(int layer) {
  const std::vector<size_t> off = PartOffsets(layer);
  std::vector<float*> work;
  for (auto& r : replicas_) work.push_back(r.layer_grad);
  if (Status s = reducer_->ReduceScatterSum(work, off); !s.ok()) {
    return Status(s.code(), absl::StrCat("reducing layer ", layer, "'s gradient: ", s.message()));
  }
  for (size_t i = 0; i < replicas_.size(); ++i) {
    Replica& r = replicas_[i];
    float* part = r.parts[static_cast<size_t>(layer - options_.begin)].grads;
    r.ops->ResidualForward(part, part, r.layer_grad + off[i], off[i + 1] - off[i]);
  }
  return absl::OkStatus();
}

void ReplicatedFragment::InputGrad(float* host) const {
  for (const auto& r : replicas_) {
    r.ops->Download(host + r.row_begin * RowFloats(false), r.fragment->InputGrad(),
                    r.rows * RowFloats(false));
  }
}

void ReplicatedFragment::ZeroGrads() {
  for (auto& r : replicas_) {
    r.fragment->ZeroGrads();
    for (const LayerPart& p : r.parts) {
      if (p.floats > 0) r.ops->Zero(p.grads, static_cast<size_t>(p.floats));
    }
  }
}

Status ReplicatedFragment::ReduceGradients() {
  if (replicas_.size() == 1) return absl::OkStatus();
  std::vector<float*> grads;
  for (auto& r : replicas_) grads.push_back(r.fragment->MutableGradients());
  // The held gradient; a zero2 / zero3 layer's parts were reduced as they were made.
  RETURN_IF_ERROR(reducer_->AllReduceSum(grads, primary().held_floats()));
  // A whole model computes both parts of wte's gradient itself: the peer part too.
  if (is_first() && is_last() && TiedHead(config_)) {
    std::vector<float*> peer;
    for (auto& r : replicas_) peer.push_back(r.fragment->TiedGradPeer());
    RETURN_IF_ERROR(reducer_->AllReduceSum(peer, layout().model().size(Tensor::kWte)));
  }
  return absl::OkStatus();
}

void ReplicatedFragment::TiedGradOwn(float* host) const {
  const auto& r = replicas_[0];
  r.ops->Download(host, r.fragment->TiedGradOwn(), layout().model().size(Tensor::kWte));
}

void ReplicatedFragment::SetTiedGradOwn(const float* host) {
  for (auto& r : replicas_) {
    r.ops->Upload(r.fragment->MutableTiedGradOwn(), host, layout().model().size(Tensor::kWte));
  }
}

void ReplicatedFragment::SetTiedGradPeer(const float* host) {
  for (auto& r : replicas_) {
    r.ops->Upload(r.fragment->TiedGradPeer(), host, layout().model().size(Tensor::kWte));
  }
}

void ReplicatedFragment::CombineTiedGrads() {
  for (auto& r : replicas_) r.fragment->CombineTiedGrads();
}

std::vector<double> ReplicatedFragment::GradSliceSums() const {
  std::vector<double> sums = primary().GradSliceSums();
  // A sharded layer's slices: the sums of their pieces in each replica's part.
  ForEachPartPiece(false, [&](const Replica& r, const LayerPart& p, int l, Tensor t, int64_t k,
                              int64_t, int64_t n) {
    sums[layout().model().SliceIndex(t, l)] += r.ops->SumSquares(p.grads + k, n);
  });
  return sums;
}

void ReplicatedFragment::GetGradients(float* host) const {
  primary().GetGradients(host);
  ForEachPartPiece(false,
                   [&](const Replica& r, const LayerPart& p, int, Tensor, int64_t k, int64_t flat,
                       int64_t n) { r.ops->Download(host + flat, p.grads + k, n); });
}

void ReplicatedFragment::SetGradients(const float* host) {
  for (auto& r : replicas_) r.fragment->SetGradients(host);
  ForEachPartPiece(false,
                   [&](const Replica& r, const LayerPart& p, int, Tensor, int64_t k, int64_t flat,
                       int64_t n) { r.ops->Upload(p.grads + k, host + flat, n); });
}

Status ReplicatedFragment::Step(const OptimizerOptions& options, float lr, float grad_scale,
                                int t) {
  for (auto& r : replicas_) r.fragment->Step(options, lr, grad_scale, t);
  if (!sharded()) return absl::OkStatus();  // (a sharded layer makes the held part zero1)
  // ZeRO-1: each replica stepped its part; the reducer's all-gather gives every replica every
  // part. Elementwise AdamW on the same summed gradient: the same bits as every replica
  // stepping everything.
  std::vector<float*> params;
  std::vector<size_t> offsets;
  for (auto& r : replicas_) {
    params.push_back(r.fragment->MutableParameters());
    offsets.push_back(static_cast<size_t>(r.fragment->optimizer_begin()));
  }
  offsets.push_back(static_cast<size_t>(replicas_.back().fragment->optimizer_end()));
  if (Status s = reducer_->AllGather(params, offsets); !s.ok()) {
    return Status(s.code(), "sharded optimizer step: " + std::string(s.message()));
  }
  return StepLayers(options, lr, grad_scale, t);
}

Status ReplicatedFragment::StepLayers(const OptimizerOptions& o, float lr, float grad_scale,
                                      int t) {
  for (int l = options_.begin; l < options_.end; ++l) {
    const ShardMode m = mode(l);
    if (!ShardsGradients(m)) continue;
    const std::vector<size_t> off = PartOffsets(l);
    std::vector<float*> layer_params;
    for (size_t i = 0; i < replicas_.size(); ++i) {
      Replica& r = replicas_[i];
      const LayerPart& p = r.parts[static_cast<size_t>(l - options_.begin)];
      // zero3 steps its part where it lives; zero2 the part of its whole copy, then gathers.
      float* params = ShardsParameters(m) ? p.params : r.fragment->LayerParameters(l) + off[i];
      layer_params.push_back(r.fragment->LayerParameters(l));
      ForEachPiece(l, off[i], off[i + 1], [&](Tensor tensor, int64_t at, int64_t, int64_t n) {
        const int64_t k = at - static_cast<int64_t>(off[i]);
        r.ops->AdamW(params + k, p.grads + k, p.m + k, p.v + k, n, lr, o.beta1, o.beta2, o.eps,
                     IsDecayed(tensor) ? o.weight_decay : 0.0f, grad_scale, t);
      });
    }
    if (ShardsParameters(m)) continue;
    if (Status s = reducer_->AllGather(layer_params, off); !s.ok()) {
      return Status(s.code(), absl::StrCat("sharded step of layer ", l, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace longhaul::model
