// K fragments of one model chained in one process on one backend: the single-process
// stand-in for a pipeline, and how a whole model (K = 1) is trained and evaluated. It runs
// microbatches through the fragments in order and back, exchanges the tied-embedding
// gradient parts between the first and last fragment, combines the per-fragment gradient
// slice sums into the global norm, and steps every fragment: exactly what a pipeline
// does over the network, so a K-fragment chain gives the same bits as the whole model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/data_loader.h"
#include "model/fragment.h"
#include "model/optimizer.h"
#include "model/tied_exchange.h"

namespace longhaul::model {

struct ChainOptions {
  int fragments = 1;   // K; REQUIRES: 1 <= K <= L
  int batch_size = 1;  // B: sequences per microbatch
  int seq_len = 1;     // T
  bool training = true;
  // The tied-embedding exchange between the first and the last fragment (K >= 2):
  // "exact" (fp32, as the pipeline's default), or a codec with error feedback
  // (tied_exchange.h), as a pipeline with that tied codec computes it.
  std::string tied_codec = "exact";
};

// Results of one optimizer step.
struct StepResult {
  float loss = 0;       // mean over the step's microbatches
  float grad_norm = 0;  // before clipping
  float lr = 0;
};

class FragmentChain {
 public:
  static StatusOr<std::unique_ptr<FragmentChain>> Create(const ModelConfig& config,
                                                         const ChainOptions& options,
                                                         kernels::Ops* ops);
  // Layer boundaries of an even split of L layers into K fragments: K + 1 numbers from 0
  // to L, the first L % K fragments one layer longer.
  static std::vector<int> EvenSplit(int num_layers, int fragments);

  const ModelConfig& config() const { return config_; }
  int size() const { return int(fragments_.size()); }
  Fragment& fragment(int i) { return *fragments_[i]; }
  // Sum of the fragments' memory.
  MemoryReport memory() const;

  void InitParameters(uint64_t seed);
  // From / into a whole model's llm.c parameter array.
  void LoadFromModel(const float* model_params);
  void StoreIntoModel(float* model_params) const;
  // AdamW moments from / into whole-model llm.c-layout arrays (for training-state files).
  void LoadOptimizerState(const float* m, const float* v);
  void StoreOptimizerState(float* m, float* v) const;

  // Forward through every fragment and the loss (slot 0); returns the mean loss.
  StatusOr<float> ForwardLoss(const int32_t* tokens, const int32_t* targets);
  // Backward through every fragment, after ForwardLoss.
  Status Backward(float dloss);

  // One optimizer step over `microbatches` batches from `loader` (whose batch size is B):
  // zero gradients, forward and backward each microbatch with dloss = 1 / (B T M),
  // combine the tied embedding gradient, clip by global norm, AdamW. `step` is 0-based.
  StatusOr<StepResult> TrainStep(DataLoader& loader, int microbatches,
                                 const OptimizerOptions& optimizer, int step, int total_steps);
  // Mean loss over `batches` batches from `loader`.
  StatusOr<float> MeanLoss(DataLoader& loader, int batches);

  // TrainStep in pieces, for replicas that combine their gradients before the step
  // (fleet/local_fleet.h); TrainStep is AccumulateGradients, ReduceGradients, then ApplyStep
  // with LearningRate and ClipScale, bit for bit.
  // Zeroes the gradients, then forward and backward `microbatches` batches from `loader` with
  // `dloss` per position; returns the sum of their mean losses.
  StatusOr<double> AccumulateGradients(DataLoader& loader, int microbatches, float dloss);
  // The tied-embedding exchange (what a pipeline sends between its first and last stage
  // before the step); returns the global gradient norm.
  float ReduceGradients();
  // The global gradient norm of the gradients as they are (after ReduceGradients or
  // SetGradients).
  float GradientNorm() const;
  // AdamW on every fragment (t >= 1) with gradients scaled by `grad_scale`.
  void ApplyStep(const OptimizerOptions& optimizer, float lr, float grad_scale, int t);
  // The whole model's gradient (after ReduceGradients) as an llm.c-layout array of
  // NumParameters(config) floats, and its replacement from one (wte's tied parts included).
  void GetGradients(float* model_grads) const;
  void SetGradients(const float* model_grads);

  // Bytes the tied exchange's frames took so far, both ends together (0 when exact).
  uint64_t tied_wire_bytes() const { return tied_wire_bytes_; }

 private:
  FragmentChain(const ModelConfig& config, const ChainOptions& options)
      : config_(config), options_(options) {}

  ModelConfig config_;
  ChainOptions options_;
  // Replaces each end's tied part (n floats) with what its frame carries.
  void ExchangeTiedEncoded(size_t n);

  std::vector<std::unique_ptr<Fragment>> fragments_;
  std::vector<int32_t> inputs_, targets_;
  std::unique_ptr<TiedGradCodec> tied_codecs_[2];  // first, last; null when exact
  uint64_t tied_sends_ = 0, tied_wire_bytes_ = 0;
};

}  // namespace longhaul::model
