// Helpers shared by the scheduler tests: small models and workloads, hand-built profiles
// (uniform meshes with per-link overrides) and a cost model with free codecs, so that
// expected step times can be worked out by hand.
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "scheduler/cost_model.h"
#include "scheduler/profiles.h"

namespace longhaul::scheduler::testing {

inline model::ModelConfig SmallModel(int layers = 8) {
  return model::MakeConfig(layers, 256, 4, 512, 128);
}

// A small llama with grouped-query attention (NKV 2 < NH 4), a head width that is not C / NH
// (24, not 16) and an MLP that is not 4C (I = 96): every width of its layer differs from a
// GPT-2's of the same C and NH.
inline model::ModelConfig SmallLlama(int layers = 8, bool tied = true) {
  model::ModelConfig c = model::MakeConfig(layers, 64, 4, 300, 128);
  c.family = model::Family::kLlama;
  c.num_kv_heads = 2;
  c.head_dim = 24;
  c.intermediate_size = 96;
  c.tied_embeddings = tied;
  return c;
}

inline PipelineWorkload Workload(int microbatches = 4, const std::string& compression = "off") {
  PipelineWorkload w;
  w.microbatch_size = 4;
  w.seq_len = 128;
  w.microbatches = microbatches;
  w.compression = compression;
  return w;
}

// Sites s0..s{n-1} with the given FLOP/s, all pairs linked at `bandwidth` and `rtt`.
inline Profiles Mesh(const std::vector<double>& flops, double bandwidth, double rtt) {
  Profiles p;
  for (size_t i = 0; i < flops.size(); ++i) {
    p.sites.push_back({"s" + std::to_string(i), flops[i], 0, 0});
  }
  for (const auto& a : p.sites) {
    for (const auto& b : p.sites) {
      if (a.name != b.name) p.links.push_back({a.name, b.name, bandwidth, rtt});
    }
  }
  return p;
}

inline void SetLink(Profiles* p, const std::string& from, const std::string& to, double bandwidth,
                    double rtt) {
  for (LinkProfile& l : p->links) {
    if (l.from == from && l.to == to) l.bandwidth_bytes_per_second = bandwidth, l.rtt_seconds = rtt;
  }
}

// Codecs that cost no compute: step times become pure compute, wire and latency.
inline CostModelOptions FreeCodecs() {
  CostModelOptions o;
  o.controller.cast_bytes_per_second = 1e30;
  o.controller.quantize_bytes_per_second = 1e30;
  o.controller.topk_bytes_per_second = 1e30;
  o.controller.zstd_bytes_per_second = 1e30;
  return o;
}

inline CostModel MakeModel(const model::ModelConfig& config, const PipelineWorkload& w,
                           const Profiles& p, const CostModelOptions& o = {}) {
  auto m = CostModel::Create(config, w, p, o);
  REQUIRE(m.ok());
  return *std::move(m);
}

}  // namespace longhaul::scheduler::testing
