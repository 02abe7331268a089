// One training run of a model cut into two fragments in one process, with a codec on the
// cut: the convergence study's unit of work (convergence_study.cc).
//
// It drives two model::Fragment objects on one kernels::Ops backend the way
// FragmentChain::TrainStep does (zero gradients; per microbatch forward, loss, backward;
// tied-embedding exchange; global grad-norm clipping; AdamW), except that every tensor
// crossing the cut travels as a wire frame, as the pipeline's StageRunner sends it:
// activations (forward) and activation gradients (backward) encoded with the codec under
// study (one codec each way), targets exactly (fp32), the tied-embedding gradient parts exactly
// or with a tied codec and error feedback (CutRunOptions::tied_codec), each
// through compression::EncodeFrame and DecodeFrame, with StageRunner's stochastic-rounding seeds.
// With codec "fp32" a run is bit for bit FragmentChain's (VerifyAgainstChain checks it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"
#include "kernels/ops.h"
#include "model/data_loader.h"
#include "model/fragment.h"
#include "model/job.h"
#include "model/tied_exchange.h"
#include "model/token_data.h"

namespace longhaul::bench {

// Bytes and time spent on the cut, summed over every tensor sent so far.
struct CutTraffic {
  uint64_t codec_raw = 0;    // fp32 bytes of the activations and activation gradients
  uint64_t codec_wire = 0;   // their frames' bytes
  uint64_t exact_wire = 0;   // frames of targets and tied-embedding gradients
  uint64_t tied_wire = 0;    // of those, the tied-embedding gradients' frames (both ends)
  double codec_seconds = 0;  // encoding + decoding of the activations and gradients
};

struct CutRunOptions {
  std::string forward_codec = "fp32";   // CodecSpec string for the activations
  std::string backward_codec = "fp32";  // ... and for the activation gradients
  // The tied-embedding gradient parts: "exact" (fp32), or a codec with error feedback
  // (model/tied_exchange.h), each end adding the parts as their frames carry them.
  std::string tied_codec = "exact";
  uint64_t seed = 1;  // initialises the parameters and shuffles the training data
  int threads = 1;    // the backend's; 0: all cores
};

class CutRun {
 public:
  // `train` and `val` (may be null) are the token streams. The job's seed is not used.
  static StatusOr<std::unique_ptr<CutRun>> Create(const model::Job& job,
                                                  std::shared_ptr<const model::TokenData> train,
                                                  std::shared_ptr<const model::TokenData> val,
                                                  const CutRunOptions& options);
  ~CutRun();

  // One optimizer step over job.microbatches() microbatches (`step` 0-based, of
  // `total_steps` for the learning-rate schedule); returns the mean training loss.
  StatusOr<float> TrainStep(int step, int total_steps);

  // Mean validation loss over the job's val_batches (from the start of the validation data,
  // as model::Trainer does). `through_codec`: the activations cross the cut as in training
  // (through the forward codec: what a pipelined evaluation would see); otherwise exactly.
  StatusOr<float> Validate(bool through_codec);

  const CutTraffic& traffic() const { return traffic_; }
  // The whole model's llm.c parameter array.
  std::vector<float> Parameters() const;

 private:
  CutRun() = default;
  // Sends n floats at `src` (backend memory) over the cut into `dst` (backend memory) with
  // `codec`, as one frame of shape `shape`. `counted_as_codec`: the tensor is an activation
  // or activation gradient (the codec_* counters), else targets or tied gradients.
  Status Transfer(const compression::Codec& codec, const float* src, float* dst, size_t n,
                  std::vector<int64_t> shape, uint64_t seed, bool counted_as_codec);

  // Sends the microbatch's targets (tokens_ / targets_) to the last stage as an exact frame:
  // for the subspace-cut variant each sequence's window of T + 1 tokens, inputs and targets.
  Status SendTokens(uint64_t seed);

  model::Job job_;
  std::unique_ptr<kernels::Ops> ops_;  // declared before the fragments: outlives them
  std::unique_ptr<model::Fragment> first_, last_;
  std::unique_ptr<compression::Codec> forward_, backward_, exact_;
  std::unique_ptr<model::TiedGradCodec> tied_[2];  // first, last; null when exact
  std::unique_ptr<model::DataLoader> train_loader_, val_loader_;
  std::vector<int32_t> tokens_, targets_;
  std::vector<float> host_;    // host staging of what crosses the cut
  float* received_ = nullptr;  // (B,T,C) backend buffer for what arrives over the cut
  CutTraffic traffic_;
};

// Trains `steps` steps of `job` with codec fp32 both as a CutRun and as a 2-fragment
// model::FragmentChain, and fails unless every step's loss and the final parameters are
// identical bit for bit.
Status VerifyAgainstChain(const model::Job& job,
                          const std::shared_ptr<const model::TokenData>& train, uint64_t seed,
                          int threads, int steps);

}  // namespace longhaul::bench
