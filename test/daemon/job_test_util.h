// Helpers for tests that run jobs on in-process daemons: the losses of the same job trained
// in one process (the bit-exact reference), and waiting for a job to end.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/daemon.h"
#include "model/checkpoint.h"

namespace longhaul::testing {

// The per-step losses of `yaml` trained in one process (model::Trainer), with checkpoints in
// a fresh temporary directory; as `fragments` chained fragments whose tied-embedding exchange
// uses `tied_codec` (model/tied_exchange.h; "exact" is every split's losses).
StatusOr<std::vector<float>> TrainLocalLosses(const std::string& yaml, int fragments = 1,
                                              const std::string& tied_codec = "exact");
// The validation losses of `yaml` (its data.val) trained in one process: (step, loss).
StatusOr<std::vector<std::pair<int, float>>> TrainLocalValLosses(const std::string& yaml);

// Polls job `id` on its coordinator `d` until it completed, failed or was cancelled, or
// `timeout` passed; returns its last status (all losses).
v1::JobStatus WaitJobEnd(daemon::Daemon& d, const std::string& id, std::chrono::seconds timeout);

// Job `id`'s model as its coordinator `d` exports it (`longhaul export`), written to a file
// in a fresh temporary directory `dir_name` and read back as a checkpoint.
StatusOr<model::Checkpoint> ExportedCheckpoint(daemon::Daemon& d, const std::string& id,
                                               const std::string& dir_name);
// The job's Hugging Face export (Control API format "hf") written into a fresh directory
// `dir_name` under the test's temporary directory; returns its path.
StatusOr<std::string> ExportedHfDir(daemon::Daemon& d, const std::string& id,
                                    const std::string& dir_name, const std::string& dtype = "f32");

}  // namespace longhaul::testing
