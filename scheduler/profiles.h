// What the scheduler knows about the sites and links a job may use: each site's sustained
// compute rate on the job's layer shapes (from a calibration run, scheduler/calibration.h),
// its memory capacity and AdamW throughput, and each directed link's bandwidth and RTT (the
// link monitor's estimates). Profiles are plain data: the daemon fills them from
// measurements, `longhaul plan` from a YAML file (scheduler/profiles_yaml.h), tests and the
// scale study from generated topologies (scheduler/topology.h).
//
// The FLOP conventions that turn a profile's FLOP/s into seconds live here too, so that a
// calibration and a cost estimate always count the same FLOPs, for every model family: per
// token, a layer's forward is its four matmuls over the family's activation widths
// (model::Widths: qkv, attention, mlp_in, mlp_hidden) plus attention over the full context
// (scores and weighted values, not halved for the causal mask, as llm.c and PaLM count it),
//   2 (C qkv + attention C + C mlp_in + mlp_hidden C) + 2 * 2 T NH HD,
// which is GPT-2's 24 C^2 + 4 T C (qkv 3C, attention C, MLP 4C and 4C, NH HD = C) and a
// llama's 2 C ((NH + 2 NKV) HD + NH HD + 2I + I) + 4 T NH HD; the output head's forward is
// 2 C Vp, and a backward costs twice its forward.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"

namespace longhaul::scheduler {

struct SiteProfile {
  std::string name;
  // Sustained FLOP/s of this site's devices on the job's layer shapes (forward and backward
  // together, FLOPs counted as above). REQUIRES: > 0.
  double flops = 0;
  // What one stage may allocate here (the daemon's memory_limit_mb); 0 = no limit.
  int64_t memory_bytes = 0;
  // AdamW parameter updates per second; 0 = the optimizer step is not modelled.
  double optimizer_params_per_second = 0;
  // The devices a stage here is sharded or replicated across (scheduler/shard_plan.h; `flops`
  // and `optimizer_params_per_second` above are all of them together): how many, what one
  // holds (0 = no limit) and the ring bus bandwidth and latency of a collective between them
  // (the bandwidth REQUIRED where devices > 1).
  int devices = 1;
  int64_t device_memory_bytes = 0;
  double device_link_bytes_per_second = 0;
  double device_link_latency_seconds = 0;
};

// One direction of the link between two sites.
struct LinkProfile {
  std::string from, to;
  double bandwidth_bytes_per_second = 0;  // REQUIRES: > 0
  double rtt_seconds = 0;                 // REQUIRES: >= 0
};

struct Profiles {
  std::vector<SiteProfile> sites;
  std::vector<LinkProfile> links;

  // nullptr when absent.
  const SiteProfile* Site(const std::string& name) const;
  const LinkProfile* Link(const std::string& from, const std::string& to) const;
  int SiteIndex(const std::string& name) const;  // -1 when absent
};

// The most devices a site profile may name.
inline constexpr int kMaxSiteDevices = 4096;

// OK when names are unique and non-empty, every number is in range, links name known sites
// (not a site to itself) and each direction appears once. Errors name the entry.
Status ValidateProfiles(const Profiles& profiles);

// OK when every site in `sites` has a profile and every ordered pair of them a link.
Status CheckCoverage(const Profiles& profiles, const std::vector<std::string>& sites);

// ---- FLOP conventions (per microbatch of B sequences of T tokens) ------------------------
// One transformer layer's forward, per token (`seq_len`: the context its attention spans).
double LayerForwardFlopsPerToken(const model::ModelConfig& config, int seq_len);
// One transformer layer's forward.
double LayerForwardFlops(const model::ModelConfig& config, int batch_size, int seq_len);
// The final norm, output head and loss (forward) of the last stage.
double HeadForwardFlops(const model::ModelConfig& config, int batch_size, int seq_len);
// A backward pass costs this many times its forward.
inline constexpr double kBackwardFlopsFactor = 2.0;

// FLOP/s implied by a measured forward + backward time of one layer on one microbatch.
double FlopsFromLayerSeconds(const model::ModelConfig& config, int batch_size, int seq_len,
                             double layer_forward_backward_seconds);

}  // namespace longhaul::scheduler
