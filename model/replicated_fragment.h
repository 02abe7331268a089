// Data parallelism inside a site: one fragment replicated on several backends (a site's GPUs,
// or CPU replicas), each microbatch split by rows (sequences) between them, the gradients
// all-reduced before the optimizer step (kernels/replica_reducer.h: NCCL between GPUs), so the
// replicas take identical steps and stay identical. To the pipeline it looks like one
// fragment of the whole microbatch: inputs and outputs are host buffers of all B rows, and one
// frame per microbatch crosses each link whatever the replica count.
//
// The per-position loss weight (dloss) is the same for every row, so splitting rows changes
// only the order of the gradient sums: with one replica this is the plain fragment, bit for
// bit; with several, the losses match within float rounding.
//
// With options.shard_optimizer (ZeRO-1) each replica keeps the AdamW moments of one part of
// the flat layout only (1/R of the optimizer memory each) and steps those parameters; the
// parts are then gathered into every replica. AdamW is elementwise and every replica holds the
// same summed gradient, so this is the replicated step bit for bit; checkpoints hold the whole
// state as before (Get/SetOptimizerState gather and scatter the parts).
//
// options.layer_modes shards further, per layer (OSDP, model/shard_mode.h; chosen by
// scheduler/shard_plan.h): replica i keeps part i of a zero2 layer's summed gradient and AdamW
// state, and of a zero3 layer's parameters too. The layers then run one at a time across the
// replicas: a zero3 layer's parameters are all-gathered into a working buffer before its
// forward and again before its backward (two buffers: the layer in use and the next), and a
// zero2 or zero3 layer's gradient is made whole in a working buffer and reduce-scattered into
// the parts right after its backward, every microbatch; after the step a zero2 layer's stepped
// parts are all-gathered. With one microbatch a step that is the replicated step's sums in
// the same order; with several, the microbatches' gradients are summed over the replicas
// first, so the bits differ within float rounding. The layers that are not zero2 or zero3 and
// the tensors outside the layers are held as before: replicated, or zero1 when
// shard_optimizer is set or any layer is sharded. Checkpoints and the host views
// (Get/SetParameters, the gradients, the optimizer state) are the whole flat layout whatever
// the modes, so a resume may change them and the device count.
#pragma once

#include <memory>
#include <vector>

#include "common/status.h"
#include "kernels/ops.h"
#include "kernels/replica_reducer.h"
#include "model/fragment.h"

namespace longhaul::model {

class ReplicatedFragment {
 public:
  // options.batch_size is the whole microbatch B; replica i gets rows [start_i, start_i + b_i)
  // (the first B % R replicas one more). `replicas` (backends) must outlive this object.
  // REQUIRES: 1 <= replicas.size() <= options.batch_size.
  static StatusOr<std::unique_ptr<ReplicatedFragment>> Create(const ModelConfig& config,
                                                              const FragmentOptions& options,
                                                              std::vector<kernels::Ops*> replicas);
  ~ReplicatedFragment();

  // The rows (sequences) of a microbatch of `batch_size` each of `replicas` replicas takes:
  // the first batch_size % replicas one more than the rest.
  static std::vector<int> ReplicaRows(int batch_size, int replicas);
  // What replica i of `replicas` allocates (its fragment, its parts of the sharded layers and
  // the working buffers), one report per replica; the same options as Create.
  static std::vector<MemoryReport> EstimateMemory(const ModelConfig& config,
                                                  const FragmentOptions& options, int replicas);
  // Bytes of one replica's staging buffer for received activations and gradients, for
  // `options.batch_size` rows (in EstimateMemory's shared bytes; the cost model's too).
  static int64_t StagingBytes(const ModelConfig& config, const FragmentOptions& options);

  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  const Fragment& primary() const { return *replicas_[0].fragment; }
  bool is_first() const { return primary().is_first(); }
  bool is_last() const { return primary().is_last(); }
  bool needs_tokens() const { return primary().needs_tokens(); }
  int input_width() const { return primary().input_width(); }
  int output_width() const { return primary().output_width(); }
  const FragmentLayout& layout() const { return primary().layout(); }
  std::string reducer_name() const { return reducer_->name(); }
  // The AdamW state is split over the replicas (zero1 or more).
  bool sharded() const { return options_.shard_optimizer && replicas_.size() > 1; }
  // Each layer's mode as it runs (replicate or zero1 for the held ones).
  std::vector<ShardMode> layer_modes() const;

  // ---- parameters and optimizer state (host, flat layout; every replica gets the same) ----
  void InitParameters(uint64_t seed);
  void SetParameters(const float* host);
  void GetParameters(float* host) const;
  void LoadFromModel(const float* model_params);
  void SetOptimizerState(const float* m_host, const float* v_host);
  void GetOptimizerState(float* m_host, float* v_host) const;

  // ---- one microbatch (host buffers of all B rows) ----------------------------------------
  // As Fragment::Forward: tokens (B*T) when needs_tokens(), activations (B,T,input width)
  // after the first fragment.
  Status Forward(int slot, const int32_t* tokens, const float* activations);
  // Not last: the output activations (B,T,C) of `slot` into `host`.
  void Output(int slot, float* host) const;
  // Last: mean loss over all B*T positions.
  StatusOr<float> Loss(int slot, const int32_t* targets);
  // Last: output_grad null, dloss the per-position weight; others: output_grad (B,T,C).
  Status Backward(int slot, const float* output_grad, float dloss);
  // Not first: the input gradient (B,T,C) of the last Backward into `host`.
  void InputGrad(float* host) const;
  // One replica only: Output(slot) and InputGrad() where they are, in the backend's memory
  // (for encoding on the device before the copy to the host).
  const float* DeviceOutput(int slot) const { return replicas_[0].fragment->Output(slot); }
  const float* DeviceInputGrad() const { return replicas_[0].fragment->InputGrad(); }
  // One replica only: the backend buffer Forward's activations and Backward's output_grad are
  // uploaded into. Passing it as either (a device decoder having written the tensor there)
  // skips the upload.
  float* DeviceInput() { return replicas_[0].in; }

  // Waits until every replica's queued work is done (GPU backends run asynchronously; for
  // timing compute).
  void Synchronize() {
    for (auto& r : replicas_) r.ops->Synchronize();
  }

  // ---- end of step ------------------------------------------------------------------------
  void ZeroGrads();
  // Sums the gradients over the replicas (every replica then holds the sum). Call once per
  // step, after the last Backward and before the tied-embedding exchange.
  Status ReduceGradients();
  // Tied embedding: this fragment's part of wte's gradient (after ReduceGradients), and the
  // peer's part into every replica. n = Vp * C floats.
  void TiedGradOwn(float* host) const;
  // Replaces this fragment's own part on every replica (with what a compressed exchange's
  // frame carries, model/tied_exchange.h).
  void SetTiedGradOwn(const float* host);
  void SetTiedGradPeer(const float* host);
  void CombineTiedGrads();
  std::vector<double> GradSliceSums() const;
  // The combined gradient (after CombineTiedGrads) into `host` (layout().total() floats), and
  // its replacement on every replica: pipeline replicas sum their gradients between them
  // (fleet/, sync mode step).
  void GetGradients(float* host) const;
  void SetGradients(const float* host);
  // Sharded, the stepped parts are all-gathered by the reducer (kernels/replica_reducer.h):
  // errors are its.
  Status Step(const OptimizerOptions& options, float lr, float grad_scale, int t);

 private:
  // A replica's part of one zero2 or zero3 layer's block (FragmentLayout::layer_floats).
  struct LayerPart {
    int64_t floats = 0;       // of the layer's block (0: a held layer, or an empty part)
    float* params = nullptr;  // zero3: the part's parameters
    float* grads = nullptr;   // the part of the summed gradient
    float *m = nullptr, *v = nullptr;
  };
  struct Replica {
    kernels::Ops* ops = nullptr;
    std::unique_ptr<Fragment> fragment;
    int row_begin = 0, rows = 0;
    float* in = nullptr;           // (rows,T,C) staging for received activations / gradients
    std::vector<LayerPart> parts;  // by layer - begin; empty for held layers
    float* gathered[2] = {nullptr, nullptr};  // zero3: a layer's parameters (in use, next)
    float* layer_grad = nullptr;  // a zero2 / zero3 layer's whole gradient, one microbatch
  };
  ReplicatedFragment() = default;
  size_t RowFloats(bool output) const;  // T * the input's or the output's width
  ShardMode mode(int layer) const {
    return bound_ ? options_.layer_modes[static_cast<size_t>(layer - options_.begin)]
                  : ShardMode::kReplicate;
  }
  // Part i of layer `layer`'s block: offsets[i] .. offsets[i + 1].
  std::vector<size_t> PartOffsets(int layer) const;
  // Calls fn(tensor, offset in the block, offset in the flat layout, floats) for every piece
  // of [begin, end) of the layer's block, split where its tensors' slices meet.
  template <typename Fn>
  void ForEachPiece(int layer, int64_t begin, int64_t end, Fn fn) const;
  // Calls fn(replica, its part, layer, tensor, offset in the part, offset in the flat layout,
  // floats) for every piece of every replica's part of each zero3 layer (zero3_only) or each
  // zero2 and zero3 layer.
  template <typename Fn>
  void ForEachPartPiece(bool zero3_only, Fn fn) const;
  // The per-replica halves of the passes: stage the rows, then run (all layers, or the first
  // part when the layers run one at a time).
  Status ForwardReplica(Replica& r, int slot, const int32_t* tokens, const float* activations,
                        bool whole);
  Status BackwardReplica(Replica& r, int slot, const float* output_grad, float dloss, bool whole);
  // zero3: layer `layer`'s parameters gathered into every replica's working buffer and bound.
  Status GatherLayer(int layer);
  // A zero2 / zero3 layer's working gradients reduce-scattered into the parts.
  Status ScatterLayerGrad(int layer);
  Status StepLayers(const OptimizerOptions& options, float lr, float grad_scale, int t);

  ModelConfig config_;
  FragmentOptions options_;
  std::vector<Replica> replicas_;
  std::unique_ptr<kernels::ReplicaReducer> reducer_;
  bool bound_ = false;  // some layer is zero2 or zero3 (and there are replicas to shard over)
};

}  // namespace longhaul::model
