// What a stage carries from step to step beyond its checkpoint (stage_checkpoint.h), at a step:
// with pipeline replicas, local mode's outer-step anchor and momentum and the sync codec's
// error-feedback residual of every parameter slice (fleet/); with a lossy tied-embedding codec
// (model/tied_exchange.h), the first or last stage's tied residual.
// DIR/sync_STEP_BEGIN-END.bin, in the durable-file shape (model/durable_file.h), written
// atomically before the stage checkpoint of the same step (so a stage checkpoint of a
// replicated job always has its sync state), with its sizes and an XXH64 of everything verified
// on load: a flipped byte, a truncation or sizes that do not fit the fragment are DataLoss
// naming the file, and nothing larger than this fragment's state can be is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/file_env.h"
#include "common/status.h"

namespace longhaul::daemon {

struct SyncState {
  uint64_t step = 0;
  std::vector<float> anchor, momentum;        // empty in sync mode step
  std::vector<std::vector<float>> residuals;  // by slice; empty when none is carried
  std::vector<float> tied_residual;           // empty when none is carried
  // Gossip with sync.tracking (fleet/gossip_node.h): each parameter's correction and x after
  // the last round, and the learning rates of the steps since, summed; empty otherwise.
  std::vector<float> corrections, drift_anchor;
  double lr_sum = 0;
  // Gossip with an outer step other than plain averaging (fleet/gossip_node.h, BeginRound):
  // the node's outer anchor and momentum; empty otherwise.
  std::vector<float> gossip_outer_anchor, gossip_outer_momentum;
  // Gossip over compressed links (fleet/gossip_link_node.h): the node's state as it saves it
  // (weights, its links' copies, tracking's); empty otherwise.
  std::vector<uint8_t> gossip_links;
};

std::string SyncCheckpointPath(const std::string& dir, uint64_t step, int layer_begin,
                               int layer_end);

// Written and read through `env` (the stage's, StageRunnerContext::env.files).
Status WriteSyncState(FileEnv& env, const std::string& path, const SyncState& state);
// `fragment_floats`: the fragment's parameter count (what anchor and momentum, corrections and
// drift anchor, and the gossip outer anchor and momentum must hold, when present); `slice_sizes`:
// its slices' sizes (what the residuals must hold, when present); `tied_floats`: wte's size (what
// the tied residual must hold, when present); `max_link_bytes`: the most a gossip link state of
// this fragment can take (0: none may be there).
StatusOr<SyncState> ReadSyncState(FileEnv& env, const std::string& path, uint64_t step,
                                  int64_t fragment_floats, const std::vector<int64_t>& slice_sizes,
                                  int64_t tied_floats, uint64_t max_link_bytes = 0);

}  // namespace longhaul::daemon
