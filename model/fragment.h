// A Fragment: layers [begin, end) of a GPT-2 or llama model (model/config.h) on one kernel
// backend, plus the token (and, for GPT-2, position) embeddings when it is the first
// fragment and the final norm, the output head (its own copy of wte when tied) and the loss
// when it is the last. The whole model is the fragment
// [0, L), first and last at once, and runs exactly the same code as any split: a model
// trained as k chained fragments produces the same bits as the whole model.
//
// Pipelining (1F1B): up to `slots` microbatches can be between Forward and Backward at
// once; each slot has its own preallocated activation buffers. The last fragment's head
// buffers (logits, probabilities) exist once: on the last fragment, Loss(s) must be
// followed by Backward(s) before the next Loss, as in 1F1B where the last stage runs a
// microbatch's forward and backward back to back.
//
// Every buffer is allocated once, at Create, through the backend; MemoryReport says how
// much. Gradients accumulate over microbatches until ZeroGrads.
//
// Tied embedding: the first fragment computes the encoder's part of wte's gradient, the
// last the head's part. Each keeps a buffer for the other part (TiedGradPeer) that the
// pipeline fills from the peer; CombineTiedGrads then forms head + encoder (in that order)
// in both, so both copies of wte take identical steps. A whole model fills both parts
// itself and runs the same CombineTiedGrads.
//
// Subspace-cut variant (config.residual_subspace = K > 0, model/subspace.h): the head is
// untied (no tied-gradient exchange: TiedGradOwn / TiedGradPeer are null), what crosses a
// cut before its unconstrained layers is K coordinates per position (input_width(),
// output_width()), and a fragment that rebuilds the stream from them needs the tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/optimizer.h"
#include "model/shard_mode.h"

namespace longhaul::model {

struct FragmentOptions {
  int begin = 0;         // first layer; REQUIRES: 0 <= begin < end <= L
  int end = 0;           // one past the last layer
  int batch_size = 1;    // B: sequences per microbatch
  int seq_len = 1;       // T; REQUIRES: <= config.max_seq_len
  int slots = 1;         // microbatches in flight at once
  bool training = true;  // false: no gradients or optimizer state (evaluation only)
  // The part of the flat layout whose AdamW moments this fragment keeps and steps:
  // [optimizer_begin, optimizer_end), end -1 for all of it. A data-parallel replica given a
  // part (ZeRO-1, replicated_fragment.h) steps only those parameters; the others come from
  // the replicas that hold them.
  int64_t optimizer_begin = 0, optimizer_end = -1;
  // ReplicatedFragment only: shard the AdamW state over its replicas (each replica its part
  // of the flat layout, the parameters all-gathered after each step).
  bool shard_optimizer = false;
  // How each layer of [begin, end) is held (model/shard_mode.h); empty: all held here. A
  // training fragment holds every tensor outside the layers and every replicate or zero1
  // layer whole; of a zero2 layer it holds the parameters but not the gradient, of a zero3
  // layer neither: its owner (ReplicatedFragment) binds buffers for them (BindLayer) before
  // the layer runs, and keeps their parameter parts, gradient parts and AdamW state itself.
  // The fragment's own gradient, Step, optimizer state and GradSliceSums then cover the held
  // slices only ("held": the flat layout less the zero2 and zero3 layers' slices, in order).
  std::vector<ShardMode> layer_modes;
};

// Bytes the fragment allocates, by purpose.
struct MemoryReport {
  int64_t parameters = 0;
  int64_t gradients = 0;  // including the tied-embedding peer buffer
  int64_t optimizer = 0;  // AdamW m and v
  int64_t activations_per_slot = 0;
  int slots = 0;
  int64_t shared = 0;  // head buffers and backward scratch, shared by slots
  int64_t total() const {
    return parameters + gradients + optimizer + activations_per_slot * slots + shared;
  }
  std::string DebugString() const;
};

class Fragment {
 public:
  // Validates config and options; allocates everything. `ops` must outlive the fragment.
  static StatusOr<std::unique_ptr<Fragment>> Create(const ModelConfig& config,
                                                    const FragmentOptions& options,
                                                    kernels::Ops* ops);
  // The memory Create would allocate, without allocating it.
  static MemoryReport EstimateMemory(const ModelConfig& config, const FragmentOptions& options);
  // Floats of the held part Create would give (held_floats()).
  static int64_t HeldFloats(const ModelConfig& config, const FragmentOptions& options);
  ~Fragment();

  const ModelConfig& config() const { return config_; }
  const FragmentLayout& layout() const { return layout_; }
  const FragmentOptions& options() const { return options_; }
  bool is_first() const { return layout_.is_first(); }
  bool is_last() const { return layout_.is_last(); }
  MemoryReport memory() const { return EstimateMemory(config_, options_); }
  kernels::Ops* ops() const { return ops_; }

  // ---- parameters (host copies in the fragment's flat layout, layout().total() floats) --
  void InitParameters(uint64_t seed);
  void SetParameters(const float* host);
  void GetParameters(float* host) const;
  // From / into a whole model's llm.c array (NumParameters(config) floats).
  void LoadFromModel(const float* model_params);
  void StoreIntoModel(float* model_params) const;

  // Floats per position of the activations Forward takes and InputGrad gives (the stream
  // at layer `begin`), and of Output and the gradient Backward takes (at layer `end`): C,
  // or K coordinates where the subspace-cut variant's stream is constrained.
  int input_width() const { return StreamWidth(config_, layout_.begin()); }
  int output_width() const { return StreamWidth(config_, layout_.end()); }
  // Whether Forward needs the tokens: the first fragment, and a fragment of the
  // subspace-cut variant that rebuilds the stream from its coordinates (one whose input is
  // coordinates).
  bool needs_tokens() const { return is_first() || rebuilds(); }

  // ---- forward -----------------------------------------------------------------------
  // `tokens` (B*T host ids < V) when needs_tokens(), else null. Fragments after the first:
  // `activations` (B,T,input_width()) in this backend's memory, the previous fragment's
  // Output; the first fragment takes null.
  Status Forward(int slot, const int32_t* tokens, const float* activations);
  // Not last: this fragment's output activations (B,T,output_width()) for `slot`, valid
  // until the slot's next Forward.
  const float* Output(int slot) const;
  // Last fragment, after Forward(slot): final layernorm, logits and cross-entropy against
  // `targets` (B*T host ids < V). Returns the mean loss over the B*T positions.
  StatusOr<float> Loss(int slot, const int32_t* targets);
  // Logits (B,T,Vp) of the last Loss, in backend memory; valid until Backward.
  const float* logits() const { return head_.logits; }

  // ---- backward ----------------------------------------------------------------------
  // Last fragment: `dloss` is d(objective)/d(each position's loss), for example
  // 1 / (B*T*microbatches); `output_grad` is null. Other fragments: `output_grad` is the
  // gradient (B,T,C, backend memory) of Output(slot). Accumulates parameter gradients.
  Status Backward(int slot, const float* output_grad, float dloss);
  // Not first: gradient with respect to the input activations of the last Backward, to
  // send to the previous fragment; valid until the next Backward.
  const float* InputGrad() const { return scratch_.dres; }

  // ---- the passes a layer at a time (for an owner that runs layers across replicas) ------
  // Forward = ForwardBegin, ForwardLayer for each layer in order, ForwardEnd; Backward =
  // BackwardBegin, BackwardLayer for each layer in reverse, BackwardEnd. The same arguments
  // and errors as Forward and Backward (checked in the Begin calls); a bound layer's buffers
  // must be bound when its layer runs.
  Status ForwardBegin(int slot, const int32_t* tokens, const float* activations);
  void ForwardLayer(int slot, int layer);
  void ForwardEnd(int slot);
  Status BackwardBegin(int slot, const float* output_grad, float dloss);
  void BackwardLayer(int slot, int layer);
  void BackwardEnd(int slot);

  // ---- layers held elsewhere (options.layer_modes) ----------------------------------------
  ShardMode layer_mode(int layer) const;
  // A zero3 layer's gathered parameters and a zero2 or zero3 layer's gradient buffer
  // (layout().layer_floats(layer) floats each, the layer's block order, backend memory),
  // used until the next BindLayer of the layer; `params` is ignored for a zero2 layer.
  void BindLayer(int layer, float* params, float* grads);
  // A zero2 layer's parameters (the layer's block, held here), for gathering the stepped
  // parts between replicas; null for other layers.
  float* LayerParameters(int layer);
  // Floats of the held part (layout().total() when no layer is zero2 or zero3).
  int64_t held_floats() const { return held_floats_; }

  // ---- optimizer (no-ops on a fragment created with training = false) ------------------
  void ZeroGrads();
  // Tied embedding (first or last fragment): this fragment's own part of wte's gradient,
  // and the buffer for the peer's part (Vp*C floats each, backend memory). A whole model
  // fills both itself.
  const float* TiedGradOwn() const;
  float* MutableTiedGradOwn();  // where a compressed exchange puts the part it sent
  float* TiedGradPeer();
  // grad(wte) = head part + encoder part.
  void CombineTiedGrads();
  // Per-slice sums of squares of the gradients (ParameterLayout slice order, num_slices
  // entries; 0 for slices of other fragments). The tied wte counts in the first fragment.
  // REQUIRES: CombineTiedGrads was called since the last Backward.
  std::vector<double> GradSliceSums() const;
  // One AdamW step (t >= 1) with gradients scaled by `grad_scale`.
  void Step(const OptimizerOptions& options, float lr, float grad_scale, int t);

  // Host copies of the gradient (flat layout; wte's is the combined one) and of the AdamW
  // moments, for tests, data-parallel reductions and training-state checkpoints. The moments'
  // host arrays are the whole layout's; a fragment holding a part (optimizer_begin/end) reads
  // and writes only that part of them.
  // SetGradients replaces the whole gradient (the tied peer part is zeroed).
  void GetGradients(float* host) const;
  void SetGradients(const float* host);
  void GetOptimizerState(float* m_host, float* v_host) const;
  void SetOptimizerState(const float* m_host, const float* v_host);

  // The held gradient in backend memory (held_floats(): the flat layout without the zero2
  // and zero3 layers), for all-reducing it in place between data-parallel replicas
  // (replicated_fragment.h).
  float* MutableGradients() { return grads_; }
  // The held parameters, the same order, for gathering a sharded step's parts.
  float* MutableParameters() { return params_; }
  // The part of the held slices whose AdamW state this fragment holds (all of it unsharded).
  int64_t optimizer_begin() const { return opt_begin_; }
  int64_t optimizer_end() const { return opt_end_; }

 private:
  // residual2 / residual3 are (B,T,R): the stream itself (R = C), or its K coordinates in a
  // constrained layer of the subspace-cut variant, where x1 / x2 (else null) are the
  // rebuilt (B,T,C) streams the two layernorms read. Widths by family (config.h's
  // LayerWidths): qkv, atty (attention output), fch (MLP input) and fch_gelu (MLP hidden:
  // GELU's output, or a llama's SwiGLU's); a llama's RMSNorms keep no mean.
  struct LayerActs {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *att, *residual2;
    float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *residual3;
    float *x1 = nullptr, *x2 = nullptr;
  };
  struct Slot {
    float* base = nullptr;     // one allocation holding input and every layer's activations
    float* input = nullptr;    // (B,T,R): embeddings (first) or received activations
    float* fixed = nullptr;    // rebuilds(): (B,T,C) E[token], the fixed part
    float* rebuilt = nullptr;  // (B,T,C) the stream rebuilt for the first unconstrained layer
    std::vector<LayerActs> layers;
    std::vector<int32_t> tokens;  // kept for the embedding backward (first fragment)
    bool forward_done = false;
  };
  struct Head {  // last fragment only
    float *lnf = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
    float *logits = nullptr, *probs = nullptr, *losses = nullptr;
    float* x = nullptr;  // subspace-cut variant: the rebuilt (B,T,C) final stream
    std::vector<int32_t> targets;
    std::vector<float> host_losses;
    int owner = -1;  // slot whose Loss the buffers hold
  };
  struct Scratch {
    float *preatt = nullptr, *proj = nullptr;  // forward
    float* dres = nullptr;                     // (B,T,C)
    float* dtmp = nullptr;                     // (B,T,max(C, attention width))
    float* dx = nullptr;  // subspace-cut variant: (B,T,C) gradient of a rebuilt stream
    // (B,T,MLP hidden) and (B,T,max(MLP input, qkv)): dfch also holds dqkv.
    float *dfch_gelu = nullptr, *dfch = nullptr;
    float *dpreatt = nullptr, *datt = nullptr;  // (B,NH,T,T)
    float* dwpe_sink = nullptr;  // llama: (T,C) where the embedding backward's dwpe goes
  };

  Fragment(const ModelConfig& config, const FragmentOptions& options, kernels::Ops* ops);
  void Allocate();
  Status CheckSlot(int slot, const char* what) const;
  Status CheckTokens(const int32_t* ids, const char* what) const;
  // Parameter / gradient pointers of tensor t (at global layer `layer` when per-layer).
  float* P(Tensor t, int layer = 0) const { return pslice_[SliceSlot(t, layer)]; }
  float* G(Tensor t, int layer = 0) const { return gslice_[SliceSlot(t, layer)]; }
  int SliceSlot(Tensor t, int layer) const {
    return int(t) * std::max(1, layout_.num_layers()) +
           (IsPerLayer(t) ? layer - layout_.begin() : 0);
  }
  // Lists the slices and points P and G of the held ones into params_ and grads_, a zero2
  // layer's parameters after the held part; bound layers' are set by BindLayer.
  void PlaceSlices();
  const float* SlotOutput(const Slot& s) const;
  // One layer of each family (fragment_pass.cc, fragment_llama.cc).
  void Gpt2LayerForward(Slot& s, int l);
  void Gpt2LayerBackward(Slot& s, int l);
  void LlamaLayerForward(Slot& s, int l);
  void LlamaLayerBackward(Slot& s, int l);
  bool llama() const { return config_.family == Family::kLlama; }
  // Subspace-cut variant: whether this fragment's input is coordinates (it rebuilds the
  // stream), whether layer l writes coordinates, and the input of layer l.
  bool rebuilds() const {
    return Subspace(config_) && layout_.begin() <= FirstUnconstrainedLayer(config_);
  }
  bool constrained(int l) const {
    return Subspace(config_) && l < FirstUnconstrainedLayer(config_);
  }
  // The stream (or its coordinates) leaving layer l - 1 of this fragment, or its input.
  const float* StreamInto(const Slot& s, int l) const;
  const float* LayerInput(const Slot& s, int l) const;
  // x = E[token] + U c, and dc += U^T dx.
  void Rebuild(float* x, const Slot& s, const float* coords);
  void AddCoordGrad(float* dcoords, const float* dx);

  ModelConfig config_;
  FragmentOptions options_;
  FragmentLayout layout_;
  kernels::Ops* ops_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  float* tied_peer_ = nullptr;  // the other part of wte's gradient
  // Subspace-cut variant's fixed tables (model/subspace.h), in backend memory.
  float* basis_ = nullptr;             // U (C, K)
  float* basis_transposed_ = nullptr;  // U^T (K, C)
  float* token_table_ = nullptr;       // E (Vp, C)
  float* zero_positions_ = nullptr;    // (T, C) zeros: E[token] has no position term (nor a llama)
  float* rope_cos_ = nullptr;          // llama: (T, HD/2) rotary tables (model/rope.h)
  float* rope_sin_ = nullptr;
  float* m_ = nullptr;  // the AdamW moments of [opt_begin_, opt_end_) of the flat layout
  float* v_ = nullptr;
  int64_t opt_begin_ = 0, opt_end_ = 0;
  // Every slice the fragment has (a tensor outside the layers, or one layer of a per-layer
  // tensor), in the flat layout's order.
  struct SliceRef {
    Tensor tensor;
    int layer;
    int64_t flat, floats;
    int64_t held;  // offset in the held part, or -1 (a zero2 or zero3 layer)
  };
  std::vector<SliceRef> slices_;
  std::vector<float*> pslice_, gslice_;  // by SliceSlot
  int64_t held_floats_ = 0;
  std::vector<Slot> slots_;
  Head head_;
  Scratch scratch_;
};

}  // namespace longhaul::model
