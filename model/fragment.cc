// Fragment construction, buffer planning and parameter transfer (passes are in
// fragment_pass.cc, the optimizer step in fragment_step.cc).
#include "model/fragment.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "model/init.h"
#include "model/rope.h"
#include "model/subspace.h"

namespace longhaul::model {
namespace {

// Floats of one slot's activations: the input plus every layer's saved tensors.
int64_t SlotFloats(const ModelConfig& c, const FragmentOptions& o) {
  const int64_t BT = int64_t(o.batch_size) * o.seq_len, C = c.channels;
  const int64_t att = int64_t(o.batch_size) * c.num_heads * o.seq_len * o.seq_len;
  const int free_from = FirstUnconstrainedLayer(c);
  const bool subspace = Subspace(c);
  const LayerWidths w = Widths(c);
  int64_t floats = BT * StreamWidth(c, o.begin);
  if (subspace && o.begin <= free_from) floats += BT * C;                       // fixed
  if (subspace && o.begin <= free_from && free_from < o.end) floats += BT * C;  // rebuilt
  for (int l = o.begin; l < o.end; ++l) {
    // ln1, ln2 (C each), qkv, atty, fch, fch_gelu (their widths: 3C, C, 4C, 4C for GPT-2),
    // residual2 and residual3 (R each), a constrained layer's rebuilt streams x1 and x2 (C
    // each), four norm statistics and the attention probabilities.
    const bool constrained = subspace && l < free_from;
    const int64_t R = constrained ? c.residual_subspace : C;
    floats += BT * (2 * C + w.qkv + w.attention + w.mlp_in + w.mlp_hidden + 2 * R +
                    (constrained ? 2 * C : 0) + 4) +
              att;
  }
  return floats;
}

ShardMode ModeOf(const FragmentOptions& o, int layer) {
  // (Create refuses a list of the wrong size; the estimates read none of it then.)
  if (!o.training || o.layer_modes.size() != static_cast<size_t>(o.end - o.begin)) {
    return ShardMode::kReplicate;
  }
  return o.layer_modes[static_cast<size_t>(layer - o.begin)];
}

// How a fragment's parameter storage divides (options.layer_modes).
struct Storage {
  int64_t held = 0;   // slices held whole: parameters and gradients
  int64_t zero2 = 0;  // zero2 layers' parameters (their gradients are bound)
};

Storage StorageOf(const FragmentLayout& layout, const FragmentOptions& o) {
  Storage s;
  s.held = layout.total();
  for (int l = o.begin; l < o.end; ++l) {
    const ShardMode m = ModeOf(o, l);
    if (!ShardsGradients(m)) continue;
    s.held -= layout.layer_floats(l);
    if (m == ShardMode::kZero2) s.zero2 += layout.layer_floats(l);
  }
  return s;
}

std::string MiB(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", double(bytes) / (1 << 20));
  return buf;
}

}  // namespace

std::string MemoryReport::DebugString() const {
  return absl::StrCat("parameters ", MiB(parameters), ", gradients ", MiB(gradients),
                      ", optimizer state ", MiB(optimizer), ", activations ",
                      MiB(activations_per_slot), " per microbatch x ", slots, " in flight, shared ",
                      MiB(shared), "; total ", MiB(total()));
}

MemoryReport Fragment::EstimateMemory(const ModelConfig& c, const FragmentOptions& o) {
  const FragmentLayout layout(c, o.begin, o.end);
  const int64_t f = sizeof(float);
  const int64_t BT = int64_t(o.batch_size) * o.seq_len, C = c.channels;
  const int64_t att = int64_t(o.batch_size) * c.num_heads * o.seq_len * o.seq_len;
  const bool tied = (layout.is_first() || layout.is_last()) && TiedHead(c);
  const bool subspace = Subspace(c);
  const LayerWidths w = Widths(c);
  MemoryReport r;
  const Storage storage = StorageOf(layout, o);
  // (Allocate takes at least a float for each buffer.)
  r.parameters = std::max<int64_t>(1, storage.held + storage.zero2) * f;
  if (o.training) {
    r.gradients =
        (std::max<int64_t>(1, storage.held) + (tied ? layout.model().size(Tensor::kWte) : 0)) * f;
    const int64_t begin = std::clamp<int64_t>(o.optimizer_begin, 0, storage.held);
    const int64_t end = o.optimizer_end < 0
                            ? storage.held
                            : std::clamp<int64_t>(o.optimizer_end, begin, storage.held);
    // An empty part still allocates one float each (Allocate).
    r.optimizer = 2 * std::max<int64_t>(1, end - begin) * f;
  }
  r.activations_per_slot = SlotFloats(c, o) * f;
  r.slots = o.slots;
  int64_t shared = BT * C + att;  // proj, preatt
  if (o.training) {
    shared += BT * C + BT * std::max(int64_t(C), w.attention) + BT * w.mlp_hidden +
              BT * std::max(w.mlp_in, w.qkv) + 2 * att;
  }
  if (c.family == Family::kLlama) {
    // The zero position table, the rotary tables and (training) the position-gradient sink.
    shared += int64_t(o.seq_len) * C * (o.training ? 2 : 1) + int64_t(o.seq_len) * w.head_dim;
  }
  if (layout.is_last()) shared += BT * C + 3 * BT + 2 * BT * c.padded_vocab_size;
  if (subspace && o.begin <= FirstUnconstrainedLayer(c)) {
    // This fragment rebuilds the stream: U, U^T, E, the zero positions; dx; the head's
    // rebuilt stream when no layer is unconstrained.
    shared += 2 * C * c.residual_subspace + int64_t(c.padded_vocab_size) * C + o.seq_len * C;
    if (o.training) shared += BT * C;
    if (layout.is_last() && c.unconstrained_layers == 0) shared += BT * C;
  }
  r.shared = shared * f;
  return r;
}

int64_t Fragment::HeldFloats(const ModelConfig& config, const FragmentOptions& options) {
  return StorageOf(FragmentLayout(config, options.begin, options.end), options).held;
}

Fragment::Fragment(const ModelConfig& config, const FragmentOptions& options, kernels::Ops* ops)
    : config_(config), options_(options), layout_(config, options.begin, options.end), ops_(ops) {}

StatusOr<std::unique_ptr<Fragment>> Fragment::Create(const ModelConfig& config,
                                                     const FragmentOptions& options,
                                                     kernels::Ops* ops) {
  RETURN_IF_ERROR(ValidateConfig(config));
  if (options.begin < 0 || options.begin >= options.end || options.end > config.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("fragment layers [", options.begin, ", ", options.end,
                     ") are not a non-empty range of [0, ", config.num_layers, ")"));
  }
  if (options.batch_size <= 0 || options.seq_len <= 0 || options.slots <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("fragment batch size (", options.batch_size, "), sequence length (",
                     options.seq_len, ") and slots (", options.slots, ") must be positive"));
  }
  if (options.seq_len > config.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("sequence length ", options.seq_len,
                                                   " exceeds the model's context of ",
                                                   config.max_seq_len));
  }
  // The kernels take int sizes: keep B*T times every activation's width and B*NH*T*T below
  // 2^31.
  const int64_t BT = int64_t(options.batch_size) * options.seq_len;
  const LayerWidths w = Widths(config);
  const int64_t largest =
      std::max({BT * w.mlp_in, BT * w.qkv, BT * w.attention, BT * config.channels,
                BT * config.padded_vocab_size, BT * config.num_heads * options.seq_len});
  if (largest >= (int64_t(1) << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "microbatch too large: ", options.batch_size, " x ", options.seq_len,
        " tokens make a buffer of ", largest, " floats; use a smaller microbatch_size"));
  }
  if (!options.layer_modes.empty() &&
      options.layer_modes.size() != static_cast<size_t>(options.end - options.begin)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fragment layers [", options.begin, ", ", options.end, "): ", options.layer_modes.size(),
        " layer sharding modes for ", options.end - options.begin, " layers"));
  }
  if (config.family == Family::kLlama && !ops->HasLlamaOps()) {
    return absl::FailedPreconditionError(
        absl::StrCat("kernel backend ", ops->name(),
                     " has no llama kernels (RMSNorm, rotary embedding, SwiGLU, grouped-query "
                     "attention); cpu, cpu-ref, cuda and cuda-bf16 have them"));
  }
  std::unique_ptr<Fragment> f(new Fragment(config, options, ops));
  f->Allocate();
  return f;
}

void Fragment::Allocate() {
  const ModelConfig& c = config_;
  const int64_t BT = int64_t(options_.batch_size) * options_.seq_len, C = c.channels;
  const int64_t att =
      int64_t(options_.batch_size) * c.num_heads * options_.seq_len * options_.seq_len;
  const bool tied = (is_first() || is_last()) && TiedHead(c);
  const bool subspace = Subspace(c);
  const LayerWidths w = Widths(c);
  const Storage storage = StorageOf(layout_, options_);
  held_floats_ = storage.held;
  params_ = ops_->Alloc(std::max<int64_t>(1, storage.held + storage.zero2));
  if (llama()) {
    const RopeTables rope = MakeRopeTables(c, options_.seq_len);
    rope_cos_ = ops_->Alloc(rope.cos.size());
    ops_->Upload(rope_cos_, rope.cos.data(), rope.cos.size());
    rope_sin_ = ops_->Alloc(rope.sin.size());
    ops_->Upload(rope_sin_, rope.sin.data(), rope.sin.size());
    zero_positions_ = ops_->Alloc(size_t(options_.seq_len) * C);
    if (options_.training) scratch_.dwpe_sink = ops_->Alloc(size_t(options_.seq_len) * C);
  }
  if (rebuilds()) {
    const SubspaceTables tables = MakeSubspaceTables(c);
    basis_ = ops_->Alloc(tables.basis.size());
    ops_->Upload(basis_, tables.basis.data(), tables.basis.size());
    basis_transposed_ = ops_->Alloc(tables.basis_transposed.size());
    ops_->Upload(basis_transposed_, tables.basis_transposed.data(), tables.basis_transposed.size());
    token_table_ = ops_->Alloc(tables.token_table.size());
    ops_->Upload(token_table_, tables.token_table.data(), tables.token_table.size());
    zero_positions_ = ops_->Alloc(size_t(options_.seq_len) * C);
    ops_->Zero(zero_positions_, size_t(options_.seq_len) * C);
  }
  const int free_from = FirstUnconstrainedLayer(c);
  if (options_.training) {
    grads_ = ops_->Alloc(std::max<int64_t>(1, held_floats_));
    if (tied) tied_peer_ = ops_->Alloc(layout_.model().size(Tensor::kWte));
    opt_begin_ = std::clamp<int64_t>(options_.optimizer_begin, 0, held_floats_);
    opt_end_ = options_.optimizer_end < 0
                   ? held_floats_
                   : std::clamp<int64_t>(options_.optimizer_end, opt_begin_, held_floats_);
    m_ = ops_->Alloc(static_cast<size_t>(std::max<int64_t>(1, opt_end_ - opt_begin_)));
    v_ = ops_->Alloc(static_cast<size_t>(std::max<int64_t>(1, opt_end_ - opt_begin_)));
  }
  PlaceSlices();
  slots_.resize(options_.slots);
  for (Slot& s : slots_) {
    s.base = ops_->Alloc(SlotFloats(c, options_));
    float* p = s.base;
    auto take = [&p](int64_t n) {
      float* q = p;
      p += n;
      return q;
    };
    s.input = take(BT * input_width());
    if (rebuilds()) s.fixed = take(BT * C);
    if (rebuilds() && free_from < layout_.end()) s.rebuilt = take(BT * C);
    s.layers.resize(layout_.num_layers());
    for (int l = layout_.begin(); l < layout_.end(); ++l) {
      LayerActs& a = s.layers[l - layout_.begin()];
      const int64_t R = constrained(l) ? c.residual_subspace : C;
      a.ln1 = take(BT * C);
      a.ln1_mean = take(BT);
      a.ln1_rstd = take(BT);
      a.qkv = take(BT * w.qkv);
      a.atty = take(BT * w.attention);
      a.att = take(att);
      a.residual2 = take(BT * R);
      a.ln2 = take(BT * C);
      a.ln2_mean = take(BT);
      a.ln2_rstd = take(BT);
      a.fch = take(BT * w.mlp_in);
      a.fch_gelu = take(BT * w.mlp_hidden);
      a.residual3 = take(BT * R);
      if (constrained(l)) {
        a.x1 = take(BT * C);
        a.x2 = take(BT * C);
      }
    }
    s.tokens.resize(BT);
  }
  scratch_.proj = ops_->Alloc(BT * C);
  scratch_.preatt = ops_->Alloc(att);
  if (options_.training) {
    scratch_.dres = ops_->Alloc(BT * C);
    scratch_.dtmp = ops_->Alloc(BT * std::max(C, w.attention));
    scratch_.dfch_gelu = ops_->Alloc(BT * w.mlp_hidden);
    scratch_.dfch = ops_->Alloc(BT * std::max(w.mlp_in, w.qkv));
    scratch_.dpreatt = ops_->Alloc(att);
    scratch_.datt = ops_->Alloc(att);
    if (rebuilds()) scratch_.dx = ops_->Alloc(BT * C);
  }
  if (is_last()) {
    head_.lnf = ops_->Alloc(BT * C);
    head_.lnf_mean = ops_->Alloc(BT);
    head_.lnf_rstd = ops_->Alloc(BT);
    head_.logits = ops_->Alloc(BT * c.padded_vocab_size);
    head_.probs = ops_->Alloc(BT * c.padded_vocab_size);
    head_.losses = ops_->Alloc(BT);
    if (subspace && c.unconstrained_layers == 0) head_.x = ops_->Alloc(BT * C);
    head_.targets.resize(BT);
    head_.host_losses.resize(BT);
  }
}

Fragment::~Fragment() {
  for (float* p : {params_,
                   grads_,
                   tied_peer_,
                   m_,
                   v_,
                   scratch_.proj,
                   scratch_.preatt,
                   scratch_.dres,
                   scratch_.dtmp,
                   scratch_.dfch_gelu,
                   scratch_.dfch,
                   scratch_.dpreatt,
                   scratch_.datt,
                   head_.lnf,
                   head_.lnf_mean,
                   head_.lnf_rstd,
                   head_.logits,
                   head_.probs,
                   head_.losses,
                   head_.x,
                   scratch_.dx,
                   basis_,
                   basis_transposed_,
                   token_table_,
                   zero_positions_,
                   rope_cos_,
                   rope_sin_,
                   scratch_.dwpe_sink}) {
    if (p != nullptr) ops_->Free(p);
  }
  for (Slot& s : slots_) {
    if (s.base != nullptr) ops_->Free(s.base);
  }
}

void Fragment::PlaceSlices() {
  const size_t n = static_cast<size_t>(kNumTensors * std::max(1, layout_.num_layers()));
  pslice_.assign(n, nullptr);
  gslice_.assign(n, nullptr);
  int64_t held = 0, zero2 = held_floats_;
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    if (!layout_.has(t)) continue;
    const int first = IsPerLayer(t) ? layout_.begin() : 0;
    const int last = IsPerLayer(t) ? layout_.end() : 1;
    for (int l = first; l < last; ++l) {
      const int64_t flat = IsPerLayer(t) ? layout_.offset(t, l) : layout_.offset(t);
      const int64_t floats = IsPerLayer(t) ? layout_.model().slice_size(t, l) : layout_.size(t);
      const bool bound = IsPerLayer(t) && ShardsGradients(layer_mode(l));
      slices_.push_back({t, l, flat, floats, bound ? -1 : held});
      if (bound) continue;
      pslice_[SliceSlot(t, l)] = params_ + held;
      if (grads_ != nullptr) gslice_[SliceSlot(t, l)] = grads_ + held;
      held += floats;
    }
  }
  // A zero2 layer's parameters: its block after the held part.
  for (int l = layout_.begin(); l < layout_.end(); ++l) {
    if (layer_mode(l) != ShardMode::kZero2) continue;
    for (int i = 0; i < kNumTensors; ++i) {
      if (IsPerLayer(Tensor(i))) {
        pslice_[SliceSlot(Tensor(i), l)] = params_ + zero2 + layout_.offset_in_layer(Tensor(i), l);
      }
    }
    zero2 += layout_.layer_floats(l);
  }
}

ShardMode Fragment::layer_mode(int layer) const { return ModeOf(options_, layer); }

void Fragment::BindLayer(int layer, float* params, float* grads) {
  const ShardMode mode = layer_mode(layer);
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    if (!IsPerLayer(t)) continue;
    const int64_t at = layout_.offset_in_layer(t, layer);
    if (ShardsParameters(mode)) pslice_[SliceSlot(t, layer)] = params + at;
    if (ShardsGradients(mode)) gslice_[SliceSlot(t, layer)] = grads + at;
  }
}

float* Fragment::LayerParameters(int layer) {
  // kLn1w's slice begins the layer's block.
  return layer_mode(layer) == ShardMode::kZero2 ? P(Tensor::kLn1w, layer) : nullptr;
}

void Fragment::InitParameters(uint64_t seed) {
  std::vector<float> host(layout_.total());
  InitFragment(layout_, seed, host.data());
  SetParameters(host.data());
}

// Held slices and zero2 layers' parameters; a zero3 layer's are its owner's.
void Fragment::SetParameters(const float* host) {
  if (held_floats_ == layout_.total()) {
    ops_->Upload(params_, host, layout_.total());
    return;
  }
  for (const SliceRef& s : slices_) {
    if (s.held >= 0 || layer_mode(s.layer) == ShardMode::kZero2) {
      ops_->Upload(P(s.tensor, s.layer), host + s.flat, s.floats);
    }
  }
}

void Fragment::GetParameters(float* host) const {
  if (held_floats_ == layout_.total()) {
    ops_->Download(host, params_, layout_.total());
    return;
  }
  for (const SliceRef& s : slices_) {
    if (s.held >= 0 || layer_mode(s.layer) == ShardMode::kZero2) {
      ops_->Download(host + s.flat, P(s.tensor, s.layer), s.floats);
    }
  }
}

void Fragment::LoadFromModel(const float* model_params) {
  std::vector<float> host(layout_.total());
  layout_.ExtractFromModel(model_params, host.data());
  SetParameters(host.data());
}

void Fragment::StoreIntoModel(float* model_params) const {
  std::vector<float> host(layout_.total());
  GetParameters(host.data());
  layout_.InsertIntoModel(host.data(), model_params);
}

}  // namespace longhaul::model
