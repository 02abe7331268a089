// `longhaul plan`'s sharding report (plan_sharding.h).
#include "tools/cli/plan_sharding.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/layer_range.h"
#include "tools/cli/format.h"

namespace longhaul::cli {

std::vector<StageSharding> ShardStages(const model::ModelConfig& model,
                                       const scheduler::PipelineWorkload& workload,
                                       const scheduler::Profiles& profiles,
                                       const scheduler::StepEstimate& estimate) {
  std::vector<StageSharding> out;
  for (size_t i = 0; i < estimate.stages.size(); ++i) {
    const scheduler::StageEstimate& st = estimate.stages[i];
    const scheduler::SiteProfile* site = profiles.Site(st.site);
    if (site == nullptr || site->devices <= 1) continue;
    scheduler::StageShape shape;
    shape.config = model;
    shape.layer_begin = st.layer_begin;
    shape.layer_end = st.layer_end;
    shape.microbatch_size = workload.microbatch_size;
    shape.seq_len = workload.seq_len;
    shape.microbatches = workload.microbatches;
    shape.slots = std::max(1, st.slots);
    scheduler::SiteDevices d;
    d.count = site->devices;
    d.memory_bytes = site->device_memory_bytes;
    d.flops = site->flops / site->devices;
    d.collective_bytes_per_second = site->device_link_bytes_per_second;
    d.collective_latency_seconds = site->device_link_latency_seconds;
    d.optimizer_params_per_second = site->optimizer_params_per_second / site->devices;
    out.push_back({static_cast<int>(i), st.site, st.layer_begin, st.layer_end, site->devices,
                   site->device_memory_bytes, scheduler::ChooseSharding(shape, d)});
  }
  return out;
}

void PrintSharding(const std::vector<StageSharding>& stages, std::ostream& out) {
  if (stages.empty()) return;
  Table t({"stage", "site", "layers", "devices", "sharding", "peak/device", "device memory",
           "compute/step", "optimizer/step", "collectives/step"});
  std::vector<std::string> refused;
  for (const StageSharding& s : stages) {
    if (!s.plan.ok()) {
      refused.push_back(
          absl::StrCat("stage ", s.stage, " (", s.site, "): ", s.plan.status().message()));
      continue;
    }
    const scheduler::ShardEstimate& e = s.plan->estimate;
    t.AddRow({std::to_string(s.stage), s.site, LayerRange(s.layer_begin, s.layer_end),
              std::to_string(s.devices), s.plan->Summary(), FormatBytes(double(e.peak_bytes)),
              s.device_memory_bytes > 0 ? FormatBytes(double(s.device_memory_bytes)) : "-",
              FormatSeconds(e.compute_seconds), FormatSeconds(e.optimizer_seconds),
              FormatSeconds(e.collective_seconds)});
  }
  out << "\nsharding across each site's devices (cost model; collectives not overlapped):\n";
  if (t.rows() > 0) out << t.str();
  for (const std::string& r : refused) out << "does not fit:   " << r << "\n";
}

nlohmann::json ShardingJson(const std::vector<StageSharding>& stages) {
  nlohmann::json j = nlohmann::json::array();
  for (const StageSharding& s : stages) {
    nlohmann::json e = {{"stage", s.stage},
                        {"site", s.site},
                        {"devices", s.devices},
                        {"device_memory_bytes", s.device_memory_bytes}};
    if (!s.plan.ok()) {
      e["error"] = std::string(s.plan.status().message());
    } else {
      const scheduler::ShardEstimate& x = s.plan->estimate;
      e["summary"] = s.plan->Summary();
      e["groups"] = nlohmann::json::array();
      for (size_t g = 0; g < s.plan->groups.size(); ++g) {
        e["groups"].push_back({{"name", s.plan->groups[g].name},
                               {"parameters", s.plan->groups[g].parameters},
                               {"mode", scheduler::ShardModeName(s.plan->modes[g])}});
      }
      e["peak_bytes"] = x.peak_bytes;
      e["state_bytes"] = x.state_bytes;
      e["working_bytes"] = x.working_bytes;
      e["fixed_bytes"] = x.fixed_bytes;
      e["compute_seconds"] = x.compute_seconds;
      e["optimizer_seconds"] = x.optimizer_seconds;
      e["collective_seconds"] = x.collective_seconds;
      e["collective_bytes"] = x.collective_bytes;
      e["step_seconds"] = x.step_seconds();
    }
    j.push_back(e);
  }
  return j;
}

}  // namespace longhaul::cli
