// A distributed job: the train-local job schema (model/job.h) plus what only a pipeline
// needs, in the same YAML file:
//
//   sites: [alpha, beta, gamma]      # candidate sites (placement: even: the pipeline order;
//                                    # first = data, last = loss)
//   placement: planned               # planned (default): the planner picks order, split and
//                                    # sites from measurements | even: as listed, even split
//   compression:
//     mode: adaptive                 # off (exact fp32) | fixed | adaptive (default)
//     codec: q8                      # mode fixed: the codec for activations and gradients
//     floor: q4                      # mode adaptive: the most lossy codec allowed
//   replan: on                       # move layers away from a straggler (default on)
//
// On a daemon, relative data paths resolve against its data_dir.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/job.h"
#include "scheduler/placement.h"

namespace longhaul::daemon {

enum class CompressionMode { kOff, kFixed, kAdaptive };

struct JobSpec {
  model::Job job;
  std::string yaml;  // the job file as submitted
  std::vector<std::string> sites;
  CompressionMode compression = CompressionMode::kAdaptive;
  std::string codec = "q8";  // kFixed
  std::string floor = "q4";  // kAdaptive
  bool replan = true;        // move layers away from a straggler
  // true (placement: planned): the planner chooses the order of `sites`, the split and which
  // sites to leave out, from the sites' calibrations and links (site_profile.h); false
  // (placement: even): `sites` in the listed order, the layers split evenly.
  bool planned = true;
};

// Parses and validates a job (errors name SOURCE:LINE:COLUMN and the key).
StatusOr<JobSpec> ParseJobSpec(const std::string& yaml, const std::string& source,
                               const std::string& base_dir);

const char* CompressionModeName(CompressionMode mode);

// What the planner and cost model need of a job: the model, its microbatches and compression,
// over `sites` (candidates, in the preferred order).
scheduler::PlacementRequest PlacementRequestFor(const JobSpec& spec,
                                                const std::vector<std::string>& sites);

}  // namespace longhaul::daemon
