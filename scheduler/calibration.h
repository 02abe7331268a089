// Calibration: how fast this site runs the job's layers. Times a few forward and backward
// passes of one transformer layer (a middle fragment of the job's model: its family and layer
// widths, microbatch size, sequence length) and one AdamW step of its parameters on a kernel
// backend, and turns the times into the SiteProfile figures the cost model uses (FLOP/s under
// profiles.h's conventions, AdamW parameters per second). A daemon runs it once per job shape
// on its devices; `longhaul plan` users can run it through tools/bench/plan_bench --calibrate.
#pragma once

#include <string>

#include "common/status.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "scheduler/profiles.h"

namespace longhaul::scheduler {

struct CalibrationOptions {
  int batch_size = 1;   // B: the job's microbatch size; REQUIRES: > 0
  int seq_len = 64;     // T; REQUIRES: 0 < T <= config.max_seq_len
  int repetitions = 3;  // timed passes (the median counts); REQUIRES: > 0
  uint64_t seed = 1;
};

struct Calibration {
  double forward_seconds = 0;    // one layer, one microbatch (median)
  double backward_seconds = 0;   // likewise
  double optimizer_seconds = 0;  // AdamW on one layer's parameters (median)
  int64_t layer_parameters = 0;
  // Seconds per layer per microbatch, forward and backward.
  double seconds_per_layer() const { return forward_seconds + backward_seconds; }
  double flops = 0;                        // FlopsFromLayerSeconds of the above
  double optimizer_params_per_second = 0;  // layer_parameters / optimizer_seconds
};

// Times one layer of `config`'s shape on `ops`. Allocates one layer's fragment (and frees it).
StatusOr<Calibration> CalibrateLayer(kernels::Ops* ops, const model::ModelConfig& config,
                                     const CalibrationOptions& options = {});

// A site profile from a calibration and the site's memory limit (0: none).
SiteProfile ProfileFromCalibration(const std::string& site, const Calibration& calibration,
                                   int64_t memory_bytes);

}  // namespace longhaul::scheduler
