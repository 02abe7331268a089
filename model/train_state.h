// The training state that an llm.c checkpoint does not hold, so that a run resumes exactly
// where it stopped: the step, the AdamW moments and the data loader position. Stored next
// to the model checkpoint as state_STEP.bin: a header of 256 int32 (magic 20241122,
// version 1, step, the model's L, C, V, maxT, and the length in bytes of the loader state),
// then m and v as fp32 in llm.c's parameter layout, then the loader state text.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"

namespace longhaul::model {

struct TrainState {
  int step = 0;              // steps completed
  std::vector<float> m, v;   // NumParameters(config) floats each
  std::string loader_state;  // DataLoaderState::Serialize()
};

// Writes atomically.
Status WriteTrainState(const std::string& path, const ModelConfig& config, const TrainState& s);
// Fails when the file is missing, malformed, truncated or written for another model shape.
StatusOr<TrainState> ReadTrainState(const std::string& path, const ModelConfig& config);

// "DIR/model_00000100.bin" and "DIR/state_00000100.bin".
std::string ModelCheckpointPath(const std::string& dir, int step);
std::string TrainStatePath(const std::string& dir, int step);
// The largest step with both files in `dir`, or 0 when there is none.
int LatestCheckpointStep(const std::string& dir);

}  // namespace longhaul::model
