// A pipeline stage's durable state at a step: its fragment's parameters and AdamW moments
// (the fragment's flat layout), and, on the first stage, the data loader's position. One
// file per (stage, step) under the job's directory, written atomically, so a restarted
// daemon resumes its stage exactly where the committed step left it. The file carries its
// format version and checksums of its header and contents (XXH64), verified on load: a
// flipped byte or a truncated file is DataLoss naming the file, never loaded. Stages keep
// the checkpoints of the last two committed steps, so a corrupt newest one falls back to
// the one before (the coordinator's rollback).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/file_env.h"
#include "common/status.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

struct StageState {
  uint64_t step = 0;  // steps completed
  int layer_begin = 0, layer_end = 0;
  std::vector<float> params, m, v;  // the fragment's flat layout
  std::string loader_state;         // first stage only
};

// DIR/stage_STEP_BEGIN-END.bin: named by step and layer range, so that when a re-plan moves
// layers, a site's new checkpoint never overwrites the old one others still fetch from.
std::string StageCheckpointPath(const std::string& dir, uint64_t step, int layer_begin,
                                int layer_end);

// Written and read through `env` (the stage's, StageRunnerContext::env.files).
Status WriteStageState(FileEnv& env, const std::string& path, const StageState& state);
// Fails when the file is missing (NotFound), truncated, corrupt or not a stage checkpoint
// (DataLoss), or holds other layers (FailedPrecondition).
StatusOr<StageState> ReadStageState(FileEnv& env, const std::string& path, int layer_begin,
                                    int layer_end);

// Deletes stage checkpoints (and their sync states, sync_checkpoint.h) in `dir` older than
// `keep_from` (the committed step before the newest: two committed checkpoints stay), listing
// and removing through `env`. Best effort: a file that cannot be removed is left for the next
// prune, and the error of the first such file is returned for the caller to log.
Status PruneStageStates(FileEnv& env, const std::string& dir, uint64_t keep_from);

// A site's record of its stage of a job (stage.pb, the assignment it last took), in the
// durable-file shape (model/durable_file.h). Reading takes an earlier build's bare protobuf
// too. NotFound when there is none; DataLoss when it is torn, corrupt, does not parse or names a
// stage outside its plan.
Status WriteStageAssignment(FileEnv& env, const std::string& path, const v1::StageAssignment& a);
StatusOr<v1::StageAssignment> ReadStageAssignment(FileEnv& env, const std::string& path);

}  // namespace longhaul::daemon
