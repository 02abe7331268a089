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

  int num_replicas() const { return static_cast<int>(replicas_.size()); }
  const Fragment& primary() const { return *replicas_[0].fragment; }
  bool is_first() const { return primary().is_first(); }
  bool is_last() const { return primary().is_last(); }
  bool needs_tokens() const { return primary().needs_tokens(); }
  int input_width() const { return primary().input_width(); }
  int output_width() const { return primary().output_width(); }
  const FragmentLayout& layout() const { return primary().layout(); }
  std::string reducer_name() const { return reducer_->name(); }
  // ZeRO-1: the AdamW state is split over the replicas.
  bool sharded() const { return options_.shard_optimizer && replicas_.size() > 1; }

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
  void GetGradients(float* host) const { primary().GetGradients(host); }
  void SetGradients(const float* host) {
    for (auto& r : replicas_) r.fragment->SetGradients(host);
  }
  // Sharded, the stepped parts are all-gathered by the reducer (kernels/replica_reducer.h):
  // errors are its (the NCCL reducer has no all-gather yet).
  Status Step(const OptimizerOptions& options, float lr, float grad_scale, int t);

 private:
  struct Replica {
    kernels::Ops* ops = nullptr;
    std::unique_ptr<Fragment> fragment;
    int row_begin = 0, rows = 0;
    float* in = nullptr;  // (rows,T,C) staging for received activations / gradients
  };
  ReplicatedFragment() = default;
  size_t RowFloats(bool output) const;  // T * the input's or the output's width

  ModelConfig config_;
  FragmentOptions options_;
  std::vector<Replica> replicas_;
  std::unique_ptr<kernels::ReplicaReducer> reducer_;
};

}  // namespace longhaul::model
