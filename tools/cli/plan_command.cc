// `longhaul plan`: parse the job and profiles, run the planner, print the plan as a table or
// JSON (see plan_command.h).
#include "tools/cli/plan_command.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/layer_range.h"
#include "common/yaml_walker.h"
#include "daemon/job/spec/job_spec.h"
#include "model/config.h"
#include "scheduler/planner.h"
#include "scheduler/profiles_yaml.h"
#include "scheduler/replica_planner.h"
#include "tools/cli/format.h"
#include "tools/cli/plan_sharding.h"

namespace longhaul::cli {
namespace {

using nlohmann::json;
using scheduler::StepEstimate;

std::string Bytes(double b) {
  if (b >= 1 << 30) return absl::StrFormat("%.1f GiB", b / (1 << 30));
  if (b >= 1 << 20) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  return absl::StrFormat("%.0f KiB", b / 1024);
}

std::string Count(double n) {
  if (n >= 1e9) return absl::StrFormat("%.2fG", n / 1e9);
  if (n >= 1e6) return absl::StrFormat("%.2fM", n / 1e6);
  if (n >= 1e3) return absl::StrFormat("%.1fk", n / 1e3);
  return absl::StrFormat("%.0f", n);
}

std::string Secs(double s) { return s > 0 ? FormatSeconds(s) : "0"; }

json EstimateJson(const StepEstimate& e) {
  json j;
  j["stages"] = json::array();
  for (size_t i = 0; i < e.stages.size(); ++i) {
    const auto& s = e.stages[i];
    j["stages"].push_back({{"index", i},
                           {"site", s.site},
                           {"layer_begin", s.layer_begin},
                           {"layer_end", s.layer_end},
                           {"forward_seconds", s.forward_seconds},
                           {"backward_seconds", s.backward_seconds},
                           {"codec_seconds", s.codec_seconds},
                           {"optimizer_seconds", s.optimizer_seconds},
                           {"compute_seconds", s.compute_seconds},
                           {"idle_seconds", s.idle_seconds},
                           {"slots", s.slots},
                           {"parameters", s.parameters},
                           {"memory_bytes", s.memory_bytes},
                           {"memory_limit_bytes", s.memory_limit_bytes}});
  }
  j["links"] = json::array();
  for (const auto& l : e.links) {
    j["links"].push_back({{"from", l.from},
                          {"to", l.to},
                          {"kind", l.kind},
                          {"codec", l.codec},
                          {"reason", l.reason},
                          {"tensor_bytes", l.tensor_bytes},
                          {"wire_bytes", l.cost.wire_bytes},
                          {"wire_seconds", l.cost.wire_seconds},
                          {"latency_seconds", l.cost.latency_seconds},
                          {"encode_seconds", l.cost.encode_seconds},
                          {"decode_seconds", l.cost.decode_seconds},
                          {"busy_seconds", l.busy_seconds}});
  }
  j["microbatches"] = e.microbatches;
  j["tokens_per_step"] = e.tokens_per_step;
  j["step_seconds"] = e.step_seconds;
  j["tokens_per_second"] = e.tokens_per_second;
  j["period_seconds"] = e.period_seconds;
  j["period_limit"] = e.period_limit;
  j["tied_exchange_seconds"] = e.tied_exchange_seconds;
  j["fits_memory"] = e.fits_memory;
  j["bottleneck"] = {{"kind", e.bottleneck.kind},
                     {"resource", e.bottleneck.resource},
                     {"seconds", e.bottleneck.seconds},
                     {"description", e.bottleneck_description}};
  j["critical_path"] = json::array();
  for (const auto& c : e.critical_path) {
    j["critical_path"].push_back(
        {{"kind", c.kind}, {"resource", c.resource}, {"seconds", c.seconds}});
  }
  return j;
}

void PrintEstimate(const StepEstimate& e, std::ostream& out) {
  Table stages({"stage", "site", "layers", "params", "fwd+bwd/mb", "codec/mb", "compute/step",
                "idle/step", "memory", "limit"});
  for (size_t i = 0; i < e.stages.size(); ++i) {
    const auto& s = e.stages[i];
    stages.AddRow({std::to_string(i), s.site,
                   absl::StrCat(LayerRange(s.layer_begin, s.layer_end), " (",
                                s.layer_end - s.layer_begin, ")"),
                   Count(double(s.parameters)), Secs(s.forward_seconds + s.backward_seconds),
                   Secs(s.codec_seconds), Secs(s.compute_seconds), Secs(s.idle_seconds),
                   Bytes(s.memory_bytes),
                   s.memory_limit_bytes ? Bytes(s.memory_limit_bytes) : "-"});
  }
  out << stages.str();
  if (!e.links.empty()) {
    Table links({"link", "carries", "codec", "wire bytes", "wire time", "latency", "wire/step"});
    for (const auto& l : e.links) {
      links.AddRow({absl::StrCat(l.from, " -> ", l.to), l.kind, l.codec, Bytes(l.cost.wire_bytes),
                    Secs(l.cost.wire_seconds), Secs(l.cost.latency_seconds), Secs(l.busy_seconds)});
    }
    out << "\n" << links.str();
  }
  out << "\npredicted step: " << Secs(e.step_seconds) << " for " << e.microbatches
      << " microbatches, " << Count(e.tokens_per_second) << " tokens/s\n"
      << "steady state:   " << Secs(e.period_seconds) << " per microbatch, set by the "
      << e.period_limit << "\n";
  if (e.tied_exchange_seconds > 0) {
    out << "tied embedding: " << Secs(e.tied_exchange_seconds)
        << " from the first stage's last backward to its summed gradient\n";
  }
  out << "bottleneck:     " << e.bottleneck_description << "\n";
  std::vector<std::string> path;
  for (size_t i = 0; i < e.critical_path.size() && i < 4; ++i) {
    const auto& c = e.critical_path[i];
    path.push_back(absl::StrCat(c.kind, " ", c.resource, " ", Secs(c.seconds)));
  }
  out << "critical path:  " << absl::StrJoin(path, "; ") << "\n";
}

// The model's family and shape. The layer's widths come from the family (model::Widths), so
// both families print the same keys: a GPT-2's kv_heads are its heads, its head_dim C / NH and
// its intermediate (MLP hidden) width 4C.
json ModelJson(const model::ModelConfig& c) {
  const model::LayerWidths w = model::Widths(c);
  return {{"family", model::FamilyName(c.family)},
          {"layers", c.num_layers},
          {"channels", c.channels},
          {"heads", c.num_heads},
          {"kv_heads", w.kv_heads},
          {"head_dim", w.head_dim},
          {"intermediate", w.mlp_hidden},
          {"vocab", c.vocab_size},
          {"context", c.max_seq_len},
          {"tied", model::TiedHead(c)},
          {"parameters", model::NumParameters(c)}};
}

// "GPT-2 L=6 C=128 ..." or "llama L=4 C=64 NH=4 NKV=2 ...": the family, then its shape (a
// llama's DebugString names its family, a GPT-2's, llm.c's shape, does not).
std::string ModelLine(const model::ModelConfig& c) {
  return c.family == model::Family::kGpt2 ? "GPT-2 " + c.DebugString() : c.DebugString();
}

std::string SyncEvery(const daemon::JobSpec& spec) {
  return spec.sync.mode == fleet::SyncMode::kStep
             ? "every step (mode step)"
             : absl::StrCat("every ", spec.sync.every, " steps (mode local)",
                            spec.sync.warmup > 0
                                ? absl::StrCat(", every step for the first ", spec.sync.warmup,
                                               " (sync.warmup, not in the estimate)")
                                : "");
}

// "Nesterov lr 1, momentum 0.5" or "plain averaging (lr 1, no momentum)": what the job's outer
// step is, given or by default (fleet::DefaultOuterStep).
json FleetJson(const scheduler::ReplicaPlan& f, const daemon::JobSpec& spec,
               const StepEstimate& single) {
  json j;
  j["count"] = f.replicas.size();
  j["auto"] = spec.replicas == 0;
  j["stages_per_replica"] = json::array();  // by replica
  for (const auto& r : f.replicas) j["stages_per_replica"].push_back(r.stages.size());
  j["sites_used"] = f.sites_used;
  j["pipelines"] = json::array();
  for (const auto& r : f.replicas) j["pipelines"].push_back(EstimateJson(r.estimate));
  // Each replica's microbatches per step (replica_microbatches: paced), else the job's.
  j["microbatches"] = json::array();
  for (size_t r = 0; r < f.replicas.size(); ++r) {
    j["microbatches"].push_back(r < f.microbatches.size() ? f.microbatches[r]
                                                          : spec.microbatches(static_cast<int>(r)));
  }
  j["sync"] = {{"mode", fleet::SyncModeName(spec.sync.mode)},
               {"every", spec.sync.mode == fleet::SyncMode::kStep ? 1 : spec.sync.every},
               {"codec", spec.sync.codec},
               {"reduce", f.gossip ? "gossip"
                          : f.ring ? "ring"
                                   : "gather"},
               {"reduce_asked", fleet::SyncReduceName(spec.sync.reduce)},
               {"gather_seconds", f.gather_seconds},
               {"ring_seconds", f.ring_seconds},
               {"bytes", f.sync_bytes},
               {"seconds", f.sync_seconds},
               {"exposed_seconds_per_step", f.exposed_sync_per_step},
               {"bottleneck", f.sync_bottleneck}};
  if (f.gossip) {
    j["sync"]["gossip_seconds"] = f.gossip_seconds;
    j["sync"]["gossip_rounds"] = f.gossip_rounds;
  }
  if (spec.sync.mode == fleet::SyncMode::kLocal) {
    j["sync"]["outer"] = {{"lr", spec.sync.outer.lr},
                          {"momentum", spec.sync.outer.momentum},
                          {"nesterov", spec.sync.outer.nesterov}};
  }
  j["step_seconds"] = f.step_seconds;
  j["tokens_per_second"] = f.tokens_per_second;
  j["vs_single_pipeline"] =
      single.tokens_per_second > 0 ? f.tokens_per_second / single.tokens_per_second : 0.0;
  return j;
}

void PrintFleet(const scheduler::ReplicaPlan& f, const daemon::JobSpec& spec,
                const StepEstimate& single, size_t candidates, std::ostream& out) {
  bool alike = true;
  for (const auto& r : f.replicas) {
    alike = alike && r.stages.size() == f.replicas[0].stages.size();
    for (size_t i = 0; alike && i < r.stages.size(); ++i) {
      alike = r.stages[i].layer_begin == f.replicas[0].stages[i].layer_begin &&
              r.stages[i].layer_end == f.replicas[0].stages[i].layer_end;
    }
  }
  out << "\nreplicas:       " << f.replicas.size() << (spec.replicas == 0 ? " (auto)" : "")
      << (alike ? " of " + std::to_string(f.replicas.empty() ? 0 : f.replicas[0].stages.size()) +
                      " stage(s) each, one split for all"
                : std::string(", each split its own way"))
      << ", on " << f.sites_used << " of " << candidates << " candidate sites\n";
  Table t({"replica", "stages", "microbatches", "step", "tokens/s"});
  for (size_t r = 0; r < f.replicas.size(); ++r) {
    const auto& p = f.replicas[r];
    const int m =
        r < f.microbatches.size() ? f.microbatches[r] : spec.microbatches(static_cast<int>(r));
    t.AddRow({std::to_string(r), scheduler::PlanDebugString(p.stages), std::to_string(m),
              Secs(p.estimate.step_seconds), Count(p.estimate.tokens_per_second)});
  }
  out << t.str();
  if (f.replicas.size() > 1) {
    out << "sync:           " << SyncEvery(spec) << " in " << spec.sync.codec
        << (f.gossip ? ", gossiped"
            : f.ring ? ", around a ring"
                     : ", gathered")
        << ": " << Bytes(f.sync_bytes) << " in " << Secs(f.sync_seconds) << " (slowest flow "
        << f.sync_bottleneck << "), " << Secs(f.exposed_sync_per_step) << " per step\n";
    if (f.gossip) {
      out << "gossip:         " << f.gossip_rounds
          << " round(s) bring the replicas within 1% of their mean, " << Secs(f.gossip_seconds)
          << " a round\n";
    }
    if (spec.sync.mode == fleet::SyncMode::kLocal) {
      out << "outer step:     " << fleet::OuterStepText(spec.sync.outer) << "\n";
    }
    if (f.gather_seconds > 0 && f.ring_seconds > 0) {
      out << "sync.reduce:    auto chose " << (f.ring ? "ring" : "gather") << " (gather "
          << Secs(f.gather_seconds) << ", ring " << Secs(f.ring_seconds)
          << " per sync, a site's flows sharing its uplink)\n";
    }
  }
  out << "all replicas:   " << Secs(f.step_seconds) << " per step, " << Count(f.tokens_per_second)
      << " tokens/s";
  if (single.tokens_per_second > 0) {
    out << " (" << absl::StrFormat("%.2fx", f.tokens_per_second / single.tokens_per_second)
        << " the single pipeline's)";
  }
  out << "\n";
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the job file"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Fail(const Status& s, std::ostream& err) {
  err << "longhaul plan: " << s.message() << "\n";
  return absl::IsInvalidArgument(s) || absl::IsNotFound(s) ? 2 : 1;
}

// The job file's text with `sites` as its sites (--sites replaces the job's, and gives a job
// file without them its sites): in a block-style file the `sites:` entry is replaced in place,
// its line count kept, or appended, so that errors still name the file's own lines; otherwise
// (a flow-style file, or one the edit does not parse back) the file re-emitted with them. A
// text that is no YAML map comes back as it is, for ParseJobSpec to say what is wrong.
std::string WithSites(const std::string& text, const std::string& source,
                      const std::vector<std::string>& sites) {
  const YamlWalker walker(source);
  auto root = walker.Root(text);
  if (!root.ok() || !root->value.IsMap()) return text;
  const YAML::Node& map = root->value;
  YAML::Emitter list;
  list << YAML::Flow << sites;
  const std::string entry = absl::StrCat("sites: ", list.c_str());
  auto has_sites = [&](const std::string& candidate) {
    auto r = walker.Root(candidate);
    if (!r.ok() || !r->value.IsMap() || !r->value["sites"].IsSequence()) return false;
    return r->value["sites"].as<std::vector<std::string>>() == sites;
  };
  if (map.Style() != YAML::EmitterStyle::Flow) {
    std::optional<size_t> begin;
    size_t end = text.size();
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == "sites") begin = it->first.Mark().pos;
    }
    for (auto it = map.begin(); begin && it != map.end(); ++it) {
      const size_t pos = static_cast<size_t>(it->first.Mark().pos);
      if (pos > *begin && pos < end) end = pos;
    }
    std::string candidate;
    if (!begin) {
      candidate = text;
      if (!candidate.empty() && candidate.back() != '\n') candidate += '\n';
      candidate += entry + "\n";
    } else {
      // The entry's lines become one line and as many empty ones; the next key keeps its
      // indentation (what follows the region's last newline).
      const std::string region = text.substr(*begin, end - *begin);
      const size_t newlines = static_cast<size_t>(std::count(region.begin(), region.end(), '\n'));
      const size_t last = region.rfind('\n');
      candidate = text.substr(0, *begin) + entry + std::string(newlines, '\n') +
                  (last == std::string::npos ? "" : region.substr(last + 1)) + text.substr(end);
    }
    if (has_sites(candidate)) return candidate;
  }
  YAML::Node copy = YAML::Clone(map);
  copy["sites"] = sites;
  YAML::Emitter out;
  out << copy;
  return out.c_str();
}

// What a placement: even job runs (Coordinator::Submit): replica r on its stage count of the
// listed sites, after the replicas before it, its layers split evenly over them in the listed
// order; each priced by the cost model as the planner prices its plans.
StatusOr<std::vector<scheduler::PlanResult>> EvenReplicas(const daemon::JobSpec& spec,
                                                          const scheduler::Planner& planner,
                                                          const std::string& coordinator) {
  std::vector<scheduler::PlanResult> out;
  for (int r = 0; r < std::max(spec.replicas, 1); ++r) {
    const auto first = spec.sites.begin() + spec.first_site(r);
    const std::vector<std::string> sites(first, first + spec.stages(r));
    scheduler::PlacementRequest request = daemon::PlacementRequestFor(spec, sites);
    request.workload.microbatches = spec.microbatches(r);
    request.workload.coordinator = coordinator;
    scheduler::PlanResult p;
    p.method = "even";
    ASSIGN_OR_RETURN(p.stages, scheduler::MakeEvenSplitPlacer()->Place(request));
    ASSIGN_OR_RETURN(auto model, planner.Model(request));
    ASSIGN_OR_RETURN(p.estimate, model.Estimate(p.stages));
    out.push_back(std::move(p));
  }
  return out;
}

std::string Replicas(const scheduler::ReplicaPlan& f) {
  std::vector<std::string> parts;
  for (const auto& r : f.replicas) parts.push_back(scheduler::PlanDebugString(r.stages));
  return absl::StrCat(f.replicas.size(), " replica(s): ", absl::StrJoin(parts, " | "));
}

json PlannerJson(const scheduler::PlanResult& plan) {
  json j = EstimateJson(plan.estimate);
  j["method"] = plan.method;
  j["unused_sites"] = plan.unused_sites;
  j["plans_priced"] = plan.plans_priced;
  j["planning_seconds"] = plan.planning_seconds;
  return j;
}

// "job demo: GPT-2 L=6 ..., 4 microbatches of 4 x 64 tokens, compression adaptive".
void PrintJobLine(const daemon::JobSpec& spec, const scheduler::PlacementRequest& request,
                  std::ostream& out) {
  const scheduler::PipelineWorkload& w = request.workload;
  out << "job " << spec.job.name << ": " << ModelLine(request.model) << ", " << w.microbatches
      << " microbatches of " << w.microbatch_size << " x " << w.seq_len << " tokens, compression "
      << w.compression << "\n";
}

// A placement: even job: the plan is what it runs (EvenReplicas), and the planner's choice
// (`best`: over the same candidates; with replicas, PlanJobReplicas) comes second, labelled as
// what placement: planned would run instead.
int PrintEvenPlan(const PlanFlags& flags, const daemon::JobSpec& spec,
                  const scheduler::Planner& planner, const scheduler::PlacementRequest& request,
                  const StatusOr<scheduler::PlanResult>& best, std::ostream& out,
                  std::ostream& err) {
  auto even = EvenReplicas(spec, planner, flags.coordinator);
  if (!even.ok()) return Fail(Annotate(even.status(), "the even split"), err);
  const StepEstimate& first = (*even)[0].estimate;
  bool fits = true;
  for (const auto& r : *even) fits = fits && r.estimate.fits_memory;
  // With replicas: the even replicas priced with their syncs, and the planner's replicas.
  std::optional<scheduler::ReplicaPlan> fleet, best_fleet;
  Status best_fleet_status;
  if (even->size() > 1) {
    auto r = daemon::ReplicaPlanRequestFor(spec, request);
    if (!r.ok()) return Fail(r.status(), err);
    fleet = scheduler::PriceReplicas(planner.profiles(), request.model, request.workload, *even,
                                     r->sync, spec.replica_microbatches);
    auto f = daemon::PlanJobReplicas(spec, planner, request);
    if (f.ok()) {
      best_fleet = *std::move(f);
    } else {
      best_fleet_status = f.status();
    }
  }

  const std::vector<StageSharding> sharding =
      ShardStages(request.model, request.workload, planner.profiles(), first);
  if (flags.output == "json") {
    json j = EstimateJson(first);
    j["sharding"] = ShardingJson(sharding);
    if (fleet) j["replicas"] = FleetJson(*fleet, spec, first);
    j["job"] = spec.job.name;
    j["placement"] = "even";
    j["model"] = ModelJson(request.model);
    j["candidates"] = request.sites;
    j["unused_sites"] = json::array();
    j["method"] = "even";
    j["even_split"] = EstimateJson(first);
    json planner_json;
    if (best.ok()) {
      planner_json = PlannerJson(*best);
      if (best_fleet) planner_json["replicas"] = FleetJson(*best_fleet, spec, best->estimate);
      if (!best_fleet_status.ok()) {
        planner_json["replicas_error"] = std::string(best_fleet_status.message());
      }
    } else {
      planner_json = {{"error", std::string(best.status().message())}};
    }
    j["planner"] = planner_json;
    out << j.dump(2) << "\n";
    return 0;
  }
  PrintJobLine(spec, request, out);
  out << "placement:      even: the listed sites in order, the layers split evenly (what the job "
         "runs)\n\n";
  if (fleet) out << "replica 0 of " << even->size() << ":\n";
  PrintEstimate(first, out);
  if (!fits) out << "memory:         the even split does not fit the sites' memory\n";
  PrintSharding(sharding, out);
  if (fleet) PrintFleet(*fleet, spec, first, request.sites.size(), out);
  out << "\n";
  if (!best.ok()) {
    out << "the planner would choose no placement: " << best.status().message() << "\n";
    return 0;
  }
  if (best_fleet) {
    out << "the planner would choose (placement: planned): " << Replicas(*best_fleet) << ", "
        << Secs(best_fleet->step_seconds) << " per step, " << Count(best_fleet->tokens_per_second)
        << " tokens/s";
    if (fleet && fleet->tokens_per_second > 0) {
      out << " ("
          << absl::StrFormat("%.2fx", best_fleet->tokens_per_second / fleet->tokens_per_second)
          << " the even replicas' tokens/s)";
    }
    out << "\n";
    return 0;
  }
  out << "the planner would choose (placement: planned): "
      << scheduler::PlanDebugString(best->stages) << ", " << Secs(best->estimate.step_seconds)
      << " per step";
  if (first.step_seconds > 0) {
    out << " (" << absl::StrFormat("%.2fx", best->estimate.step_seconds / first.step_seconds)
        << " the even split's step)";
  }
  if (!best->unused_sites.empty()) {
    out << ", leaving out " << absl::StrJoin(best->unused_sites, ", ");
  }
  out << "; " << best->method << " search over " << request.sites.size() << " candidate sites, "
      << best->plans_priced << " plans priced\n";
  if (!best_fleet_status.ok()) {
    out << "                (no replicated plan: " << best_fleet_status.message() << ")\n";
  }
  return 0;
}

}  // namespace

int RunPlan(const PlanFlags& flags, std::ostream& out, std::ostream& err) {
  auto text = ReadFile(flags.job);
  if (!text.ok()) return Fail(text.status(), err);
  auto profiles = scheduler::LoadProfiles(flags.profiles);
  if (!profiles.ok()) return Fail(profiles.status(), err);
  // --sites replaces the job's sites (and gives a job file without any its sites): the job
  // is read as if it listed them, so its checks and its even split see them.
  std::vector<std::string> sites = flags.sites;
  if (sites == std::vector<std::string>{"all"}) {
    sites.clear();
    for (const auto& s : profiles->sites) sites.push_back(s.name);
  }
  const std::string yaml = sites.empty() ? *text : WithSites(*text, flags.job, sites);
  const std::string base = std::filesystem::absolute(flags.job).parent_path().string();
  auto spec = daemon::ParseJobSpec(yaml, flags.job, base);
  if (!spec.ok()) {
    if (sites.empty() && absl::StrContains(spec.status().message(), "sites: missing")) {
      return Fail(Status(spec.status().code(), absl::StrCat(spec.status().message(),
                                                            " (or give the sites with --sites)")),
                  err);
    }
    return Fail(spec.status(), err);
  }

  scheduler::PlacementRequest request = daemon::PlacementRequestFor(*spec, spec->sites);
  request.workload.coordinator = flags.coordinator;
  scheduler::PlannerOptions options;
  options.time_budget_seconds = flags.time_budget_seconds;
  // A profiles file must give every pair of candidates a link (or a default_link).
  if (Status s = scheduler::CheckCoverage(*profiles, request.sites); !s.ok()) return Fail(s, err);
  const scheduler::Planner planner(*profiles, options);
  auto plan = planner.Plan(request);
  // placement: even: the job runs its listed sites in order, the layers split evenly; that is
  // the plan, and the planner's choice only what placement: planned would run instead.
  if (!spec->planned) return PrintEvenPlan(flags, *spec, planner, request, plan, out, err);
  if (!plan.ok()) return Fail(plan.status(), err);
  // The even split of the job's sites in the listed order, for comparison.
  std::optional<StepEstimate> even;
  auto even_stages = scheduler::MakeEvenSplitPlacer()->Place(request);
  auto model = planner.Model(request);
  if (even_stages.ok() && model.ok()) {
    if (auto e = model->Estimate(*even_stages); e.ok()) even = *e;
  }

  // A job with replicas (a count or auto): the replicated plan beside the single pipeline's.
  std::optional<scheduler::ReplicaPlan> fleet;
  if (spec->replicas != 1) {
    auto f = daemon::PlanJobReplicas(*spec, planner, request);
    if (!f.ok()) return Fail(Annotate(f.status(), "placing the replicas"), err);
    fleet = *std::move(f);
  }

  const std::vector<StageSharding> sharding =
      ShardStages(request.model, request.workload, planner.profiles(), plan->estimate);
  if (flags.output == "json") {
    json j = EstimateJson(plan->estimate);
    j["sharding"] = ShardingJson(sharding);
    if (fleet) j["replicas"] = FleetJson(*fleet, *spec, plan->estimate);
    j["job"] = spec->job.name;
    j["placement"] = "planned";
    j["model"] = ModelJson(request.model);
    j["candidates"] = request.sites;
    j["unused_sites"] = plan->unused_sites;
    j["method"] = plan->method;
    j["plans_priced"] = plan->plans_priced;
    j["planning_seconds"] = plan->planning_seconds;
    j["even_split"] = even ? EstimateJson(*even) : json(nullptr);
    out << j.dump(2) << "\n";
    return 0;
  }
  PrintJobLine(*spec, request, out);
  out << "planned over " << request.sites.size() << " candidate sites (" << plan->method
      << " search, " << plan->plans_priced << " plans priced in "
      << absl::StrFormat("%.2f s", plan->planning_seconds) << ")\n\n";
  PrintEstimate(plan->estimate, out);
  PrintSharding(sharding, out);
  if (!plan->unused_sites.empty()) {
    out << "left out:       " << absl::StrJoin(plan->unused_sites, ", ")
        << " (the plan is faster without them)\n";
  }
  if (fleet) PrintFleet(*fleet, *spec, plan->estimate, request.sites.size(), out);
  if (even) {
    out << "even split:     " << scheduler::PlanDebugString(*even_stages) << " (the listed order) ";
    if (!even->fits_memory) {
      out << "does not fit the sites' memory\n";
    } else {
      out << "would take " << Secs(even->step_seconds) << " per step ("
          << absl::StrFormat("%.2fx", even->step_seconds / plan->estimate.step_seconds)
          << " the plan's)\n";
    }
  }
  return 0;
}

void AddPlanCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<PlanFlags>();
  auto* plan = app.add_subcommand(
      "plan", "Print the planner's placement of a job (stages, predicted times, bottleneck)");
  plan->add_option("job", flags->job, "Job file, e.g. configs/demo-job.yaml")->required();
  plan->add_option("--profiles", flags->profiles,
                   "Site and link profiles (YAML; see configs/profiles.example.yaml)")
      ->required();
  plan->add_option("--coordinator", flags->coordinator,
                   "Site that will coordinate the job (default: the first stage's)");
  plan->add_option("--sites", flags->sites,
                   "Candidate sites instead of the job's (comma-separated; 'all': every profiled "
                   "site)")
      ->delimiter(',');
  plan->add_option("--time-budget", flags->time_budget_seconds,
                   "Seconds the heuristic search may take (more than 8 candidates)")
      ->capture_default_str();
  plan->callback([flags, exit_code, &app] {
    PlanFlags f = *flags;
    try {
      f.output = app.get_option("--output")->as<std::string>();
    } catch (const CLI::Error&) {
    }
    if (f.output.empty()) f.output = "table";
    *exit_code = RunPlan(f, std::cout, std::cerr);
  });
}

}  // namespace longhaul::cli
