// The adaptive controller: for each tensor sent over a directed link it picks, from a ladder
// of codecs ordered from least to most lossy, the least lossy codec whose predicted transfer
// time fits the time budget (the stage compute the transfer must hide behind), never going
// past the job's quality floor, with hysteresis so that noise in the bandwidth estimate does
// not make it flap. It is a pure function of its inputs and of the previous decision's state,
// so it is tested on synthetic link traces, and it explains every choice in one line (logs,
// /metrics, `longhaul links`).
//
// Prediction: t(codec) = rtt / 2 + EstimateEncodedSize / bandwidth + codec compute time.
//
// Rules, in order:
//   1. No bandwidth estimate: keep the previous codec, or before any, use the quality floor
//      (the safest for the budget) provisionally.
//   2. First decision with an estimate, or the previous codec is now past the floor: the
//      least lossy codec that fits, else the fastest allowed one.
//   3. The previous codec no longer fits: switch at once (the budget is a hard constraint) to
//      the least lossy codec that fits with margin, else the least lossy that fits, else the
//      fastest. Downgrades are never delayed.
//   4. The previous codec fits: keep it, unless a less lossy codec has fit within
//      (1 - upgrade_margin) * budget at every decision for a whole hysteresis window; then
//      move to the least lossy codec that fits with that margin now.
//   5. Nothing fits: the fastest allowed codec, switching only when it is faster than the
//      current one by the margin.
// So on a steady link whose noise stays inside the margin, the codec changes at most once per
// hysteresis window: an upgrade needs a window of evidence, and the margin keeps the upgraded
// codec fitting.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compression/codec_spec.h"

namespace longhaul::compression {

struct ControllerOptions {
  // Codec specs from least to most lossy. The convergence study (docs/BENCHMARKS.md,
  // "Convergence study") chose it: fp32, bf16, q8 and q4 each halve the bytes and all stay
  // within noise of fp32; q2 and every top-k variant (without error feedback) on activations
  // and their gradients end training at the corpus's unigram loss, so they are not rungs.
  std::vector<std::string> ladder = {"fp32", "bf16", "q8", "q4"};
  // A less lossy codec must fit within (1 - upgrade_margin) * budget to be adopted.
  // REQUIRES: in [0, 1).
  double upgrade_margin = 0.25;
  // ... and keep fitting so for this long. REQUIRES: >= 0.
  double hysteresis_window_seconds = 10;
  // One core's encode + decode throughput in fp32 input bytes per second, for predicting
  // the codec's own time (defaults: tools/bench/codec_bench, see docs/compression.md).
  double cast_bytes_per_second = 4e9;      // fp32 copy, fp16, bf16
  double quantize_bytes_per_second = 3e9;  // q8, q4, q2 (of the values quantized)
  double topk_bytes_per_second = 1.5e9;    // top-k selection
  double zstd_bytes_per_second = 4e8;      // of the zstd stage's input
  // Expected zstd output / input; 1 (no gain) unless measured on the job's tensors.
  double zstd_ratio = 1.0;
};

struct ControllerInput {
  double bandwidth_bytes_per_second = 0;  // link estimate; <= 0 when there is none yet
  double rtt_seconds = 0;                 // >= 0
  uint64_t tensor_bytes = 0;              // raw fp32 bytes of the tensor
  double budget_seconds = 0;              // > 0
  int quality_floor = 0;                  // index of the most lossy rung allowed
  double now_seconds = 0;                 // a monotonic clock
};

// What the controller carries from one decision to the next; start default-constructed.
struct ControllerState {
  int rung = -1;  // the current codec; -1 before the first decision
  double changed_at_seconds = 0;
  double upgrade_since_seconds = -1;  // since when a less lossy codec fits with margin
  bool provisional = false;           // chosen without a bandwidth estimate; the first one decides
};

struct Decision {
  int rung = 0;
  std::string codec;  // canonical spec string of the chosen rung
  double predicted_seconds = 0;
  bool fits = false;        // predicted_seconds <= budget
  bool changed = false;     // differs from the previous rung
  std::string explanation;  // one line, no newline
  ControllerState next;     // pass to the next decision
};

class Controller {
 public:
  // Fails on a bad ladder spec or option.
  static StatusOr<Controller> Create(const ControllerOptions& options = {});

  // The decision for this input given the previous state (see the rules above).
  StatusOr<Decision> Decide(const ControllerInput& input, const ControllerState& previous) const;

  // Predicted seconds to send the input's tensor with rung `rung`.
  double Predict(int rung, const ControllerInput& input) const;

  int rungs() const { return static_cast<int>(specs_.size()); }
  const CodecSpec& spec(int rung) const { return specs_[rung]; }
  const std::string& name(int rung) const { return names_[rung]; }
  // Index of a rung by its spec string (any spelling), or an error listing the ladder.
  StatusOr<int> FindRung(std::string_view spec) const;

 private:
  explicit Controller(const ControllerOptions& options) : options_(options) {}

  ControllerOptions options_;
  std::vector<CodecSpec> specs_;
  std::vector<std::string> names_;
};

}  // namespace longhaul::compression
