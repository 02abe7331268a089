// Scale study of the planner (docs/BENCHMARKS.md, "Placement at scale"): on generated
// multi-region topologies (scheduler/topology.h: 11 cloud regions, public inter-region RTTs,
// per-flow bandwidth falling with distance, four GPU node kinds), the step time of
//   planner      the scheduler's plan (scheduler/planner.h), from the full profiles;
//   even         an even split over the sites in name order, what a job that lists its
//                sites naively gets: over all of them (the first L when there are more sites
//                than layers), and over the fewest leading ones whose split fits memory;
//   oblivious    the planner given the same sites but every link at the mean bandwidth and
//                RTT: a placement that knows compute and memory but not the network,
// each predicted by the cost model and simulated by the discrete-event simulator with
// bandwidth that wanders +-30% every 5 s on every link and 5% compute jitter.
//   bazel run -c opt //tools/bench:plan_bench -- --sites 8,32,128 --models xl,13b
// --replicas instead compares replicated plans (pipeline replicas synced every --sync-every
// steps, scheduler/replica_planner.h) with the single pipeline:
//   bazel run -c opt //tools/bench:plan_bench -- --replicas --sites 8,32,128 --models xl,13b
// --calibrate-job JOB.yaml instead times one layer of the job's shape on this machine's CPU
// backend and prints the profile line for a profiles file.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <sstream>

#include "daemon/job/spec/job_spec.h"
#include "kernels/ops.h"
#include "model/job.h"
#include "scheduler/calibration.h"
#include "scheduler/planner.h"
#include "scheduler/replica_planner.h"
#include "scheduler/replica_simulator.h"
#include "scheduler/simulator.h"
#include "scheduler/topology.h"

namespace longhaul::scheduler {
namespace {

struct Workload {
  std::string name;
  model::ModelConfig config;
  PipelineWorkload w;
};

Workload MakeWorkload(const std::string& name) {
  Workload x;
  x.name = name;
  x.w.seq_len = 1024;
  if (name == "xl") {  // GPT-2 XL, 1.56B parameters
    x.config = model::MakeConfig(48, 1600, 25, 50257, 1024);
    x.w.microbatch_size = 8;  // too many activations for one 80 GB GPU: at least 2 stages
    x.w.microbatches = 16;
  } else if (name == "llama8b") {  // Llama 3 8B's shape: GQA 32/8, SwiGLU 14336, untied, 8.0B
    x.config = model::MakeConfig(32, 4096, 32, 128256, 8192);
    x.config.family = model::Family::kLlama;
    x.config.num_kv_heads = 8;
    x.config.head_dim = 128;
    x.config.intermediate_size = 14336;
    x.config.rope_theta = 500000;
    x.config.tied_embeddings = false;
    x.w.microbatch_size = 1;
    x.w.microbatches = 64;
  } else {  // "13b": GPT-3 13B's shape in GPT-2's architecture, 12.9B parameters
    x.config = model::MakeConfig(40, 5120, 40, 50257, 2048);
    x.w.microbatch_size = 1;
    x.w.microbatches = 64;
  }
  return x;
}

std::string Region(const std::string& site) { return site.substr(0, site.find('-')); }

struct Row {
  std::string placement;
  std::vector<StagePlan> stages;
  bool fits = false;
  double predicted = 0, simulated = 0, tokens_per_second = 0, planning = 0;
  std::string bottleneck;
};

int Study(const std::vector<int>& sizes, const std::vector<std::string>& models, uint64_t seed,
          int steps, double budget) {
  std::printf(
      "| sites | model | placement | stages | regions | predicted step | simulated step "
      "| tokens/s | vs planner | bottleneck | planning "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int n : sizes) {
    RegionTopologyOptions to;
    to.sites = n;
    to.seed = seed;
    const Profiles profiles = RegionTopology(to);
    for (const std::string& name : models) {
      const Workload wl = MakeWorkload(name);
      PlacementRequest request;
      request.model = wl.config;
      request.workload = wl.w;
      request.sites = SiteNames(profiles);
      PlannerOptions po;
      po.time_budget_seconds = budget;
      const Planner planner(profiles, po);
      auto model = planner.Model(request);
      if (!model.ok()) {
        std::cerr << model.status().message() << "\n";
        return 1;
      }
      std::vector<Row> rows;
      auto plan = planner.Plan(request);
      if (plan.ok())
        rows.push_back({"planner", plan->stages, true, 0, 0, 0, plan->planning_seconds});
      // Even splits in name order: over all sites (at most one per layer), and over the
      // fewest leading sites whose even split fits.
      PlacementRequest naive = request;
      naive.sites = SortedSiteNames(profiles);
      naive.sites.resize(std::min<size_t>(naive.sites.size(), wl.config.num_layers));
      if (auto even = MakeEvenSplitPlacer()->Place(naive); even.ok()) {
        rows.push_back({"even, all sites", *even});
      }
      bool fewest = false;
      for (size_t k = 1; k <= naive.sites.size() && !fewest; ++k) {
        PlacementRequest prefix = naive;
        prefix.sites.resize(k);
        auto even = MakeEvenSplitPlacer()->Place(prefix);
        if (!even.ok()) break;
        if (auto e = model->Estimate(*even); e.ok() && e->fits_memory) {
          rows.push_back({"even, fewest sites", *even});
          fewest = true;
        }
      }
      if (!fewest) rows.push_back({"even, fewest sites", {}});
      const Planner blind(UniformLinks(profiles), po);
      if (auto o = blind.Plan(request); o.ok()) {
        rows.push_back({"oblivious", o->stages, true, 0, 0, 0, o->planning_seconds});
      }
      // Bandwidth that wanders on every link the plans use.
      std::set<std::pair<std::string, std::string>> used;
      double horizon = 0;
      for (Row& r : rows) {
        if (r.stages.empty()) continue;
        auto e = model->Estimate(r.stages);
        r.fits = e.ok() && e->fits_memory;
        r.predicted = e.ok() ? e->step_seconds : 0;
        if (e.ok()) r.bottleneck = e->bottleneck.kind;
        horizon = std::max(horizon, r.predicted);
        for (size_t i = 0; i < r.stages.size(); ++i) {
          for (size_t j = 0; j < r.stages.size(); ++j) {
            if (i != j && (j == i + 1 || i == j + 1 || i + j == r.stages.size() - 1)) {
              used.insert({r.stages[i].site, r.stages[j].site});
            }
          }
        }
      }
      SimulatorOptions so;
      so.steps = steps;
      so.compute_jitter = 0.05;
      so.seed = seed;
      std::mt19937_64 rng(seed);
      std::uniform_real_distribution<double> wander(0.7, 1.3);
      for (const auto& [from, to_site] : used) {
        const double bw = profiles.Link(from, to_site)->bandwidth_bytes_per_second;
        LinkTrace t{from, to_site, {}};
        for (double s = 0; s < horizon * steps * 1.5 + 10; s += 5)
          t.bandwidth.push_back({s, bw * wander(rng)});
        so.links.push_back(std::move(t));
      }
      double planner_sim = 0;
      for (Row& r : rows) {
        if (!r.fits) continue;
        auto sim = Simulate(*model, r.stages, so);
        if (!sim.ok()) continue;
        r.simulated = sim->MeanStepSeconds(2);
        r.tokens_per_second =
            double(wl.w.microbatch_size) * wl.w.seq_len * wl.w.microbatches / r.simulated;
        if (r.placement == "planner") planner_sim = r.simulated;
      }
      for (const Row& r : rows) {
        std::set<std::string> regions;
        for (const auto& s : r.stages) regions.insert(Region(s.site));
        char line[512];
        if (r.stages.empty()) {
          std::snprintf(line, sizeof line,
                        "| %d | %s | %s | - | - | fits for no count | - | - | - | - | - |\n", n,
                        name.c_str(), r.placement.c_str());
        } else if (!r.fits) {
          std::snprintf(line, sizeof line,
                        "| %d | %s | %s | %zu | %zu | does not fit | - | - | - | - | - |\n", n,
                        name.c_str(), r.placement.c_str(), r.stages.size(), regions.size());
        } else {
          std::snprintf(
              line, sizeof line,
              "| %d | %s | %s | %zu | %zu | %.3f s | %.3f s | %.0f | %.2fx | %s | %s |\n", n,
              name.c_str(), r.placement.c_str(), r.stages.size(), regions.size(), r.predicted,
              r.simulated, r.tokens_per_second, planner_sim > 0 ? r.simulated / planner_sim : 0,
              r.bottleneck.c_str(),
              r.planning > 0 ? (std::to_string(int(r.planning * 1000)) + " ms").c_str() : "-");
        }
        std::fputs(line, stdout);
        std::fflush(stdout);
      }
      if (plan.ok())
        std::fprintf(stderr, "%d sites, %s: %s\n", n, name.c_str(),
                     PlanDebugString(plan->stages).c_str());
    }
  }
  return 0;
}

// One row of the replicated-plan table: the plan and replicas columns as given, the rest from
// `p`; with `own_pace`, the design where each replica steps at its own pace (paced tokens/s,
// the slowest replica's step, no exposed sync column).
// `simulated`: the replay's tokens/s over the single pipeline's replay (0: not replayed).
void PrintReplicaRow(int n, const std::string& model, const std::string& plan,
                     const std::string& replicas, const ReplicaPlan& p, double single_tps,
                     bool own_pace, double simulated = 0) {
  const double tps = own_pace ? p.paced_tokens_per_second : p.tokens_per_second;
  char exposed[32] = "-", sim[32] = "-";
  if (!own_pace) std::snprintf(exposed, sizeof(exposed), "%.4f s", p.exposed_sync_per_step);
  if (simulated > 0) std::snprintf(sim, sizeof(sim), "%.2fx", simulated);
  std::printf(
      "| %d | %s | %s | %s | %d of %d (%.0f%%) | %.3f s%s | %.2f s | %.2f | %s | %.0f | %.2fx | "
      "%s | %s |\n",
      n, model.c_str(), plan.c_str(), replicas.c_str(), p.sites_used, n, 100.0 * p.sites_used / n,
      p.replica_step_seconds, own_pace ? " (slowest)" : "", p.sync_seconds, p.sync_bytes / 1e9,
      exposed, tps, tps / single_tps, sim, p.sync_bottleneck.c_str());
}

// Bandwidth that wanders +-30% every 5 s on every link a plan uses: its pipelines' (neighbours
// and the tied-embedding ends) and, between replicas, every pair of stages sharing layers.
void AddWanderingTraces(const Profiles& profiles, const std::vector<PlanResult>& replicas,
                        double horizon, std::mt19937_64* rng, SimulatorOptions* so) {
  std::set<std::pair<std::string, std::string>> used;
  for (const LinkTrace& t : so->links) used.insert({t.from, t.to});
  for (size_t a = 0; a < replicas.size(); ++a) {
    const auto& st = replicas[a].stages;
    for (size_t i = 0; i < st.size(); ++i) {
      for (size_t j = 0; j < st.size(); ++j) {
        if (i != j && (j == i + 1 || i == j + 1 || i + j == st.size() - 1)) {
          used.insert({st[i].site, st[j].site});
        }
      }
    }
    for (size_t b = 0; b < replicas.size(); ++b) {
      if (a == b) continue;
      for (const StagePlan& s : st) {
        for (const StagePlan& d : replicas[b].stages) {
          if (std::max(s.layer_begin, d.layer_begin) < std::min(s.layer_end, d.layer_end)) {
            used.insert({s.site, d.site});
          }
        }
      }
    }
  }
  std::uniform_real_distribution<double> wander(0.7, 1.3);
  for (const auto& [from, to] : used) {
    bool have = false;
    for (const LinkTrace& t : so->links) have = have || (t.from == from && t.to == to);
    const LinkProfile* link = profiles.Link(from, to);
    if (have || link == nullptr) continue;
    LinkTrace t{from, to, {}};
    for (double s = 0; s < horizon; s += 5) {
      t.bandwidth.push_back({s, link->bandwidth_bytes_per_second * wander(*rng)});
    }
    so->links.push_back(std::move(t));
  }
}

// Replicated plans (scheduler/replica_planner.h) against the single-pipeline plan: how many
// of the sites each uses and the tokens/s the cost model predicts, with the sync priced at
// `every` inner steps per sync in q4 (or `bytes_per_value`), streamed behind the next steps,
// gathered or around rings (`reduce`), a site's flows sharing its uplink or not. With
// `split_only`, only the plans split per replica (the runtime's best) against the single one.
struct SyncPricing {
  SyncReduceCost reduce = SyncReduceCost::kCheaper;
  int fanout = 2;  // gossip's out-neighbours per round
  bool shared_uplink = true;
  bool split_only = false;
};

int ReplicaStudy(const std::vector<int>& sizes, const std::vector<std::string>& models,
                 uint64_t seed, double budget, int every, double bytes_per_value,
                 const SyncPricing& pricing, int sim_steps) {
  std::printf(
      "| sites | model | plan | replicas | sites used | replica step | sync (one) | sync GB | "
      "exposed/step | tokens/s | vs single | simulated vs single | sync bottleneck |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (int n : sizes) {
    RegionTopologyOptions to;
    to.sites = n;
    to.seed = seed;
    const Profiles profiles = RegionTopology(to);
    for (const std::string& name : models) {
      const Workload wl = MakeWorkload(name);
      ReplicaPlanRequest r;
      r.request.model = wl.config;
      r.request.workload = wl.w;
      r.request.sites = SiteNames(profiles);
      r.sync.every = every;
      r.sync.overlap = every - 1;  // streamed: the most sync.overlap allows
      r.sync.bytes_per_value = bytes_per_value;
      r.sync.reduce = pricing.reduce;
      r.sync.fanout = pricing.fanout;
      r.sync.shared_uplink = pricing.shared_uplink;
      PlannerOptions po;
      po.time_budget_seconds = budget;
      const Planner planner(profiles, po);
      auto single = planner.Plan(r.request);
      StatusOr<ReplicaPlan> fleet, paced, aligned, blocking, mb_paced, mb_blocking;
      if (!pricing.split_only) {
        fleet = PlanReplicas(planner, r);
        r.paced = true;
        paced = PlanReplicas(planner, r);
        // Aligned: every replica the same stage count and split, in lockstep.
        r.paced = false;
        r.aligned = true;
        aligned = PlanReplicas(planner, r);
        // And with blocking syncs (sync.overlap 0, the default): all of a sync's time is
        // exposed.
        r.sync.overlap = 0;
        blocking = PlanReplicas(planner, r);
        // Aligned and paced by microbatches (the job's replica_microbatches): a slower replica
        // trains fewer per step; streamed syncs, then blocking ones.
        r.paced = true;
        r.sync.overlap = r.sync.every - 1;
        mb_paced = PlanReplicas(planner, r);
        r.sync.overlap = 0;
        mb_blocking = PlanReplicas(planner, r);
      }
      // Each replica its own split (the runtime syncs each slice with the stages holding it),
      // paced by microbatches: what replica_microbatches: paced runs; streamed, then blocking.
      r.aligned = false;
      r.paced = false;
      r.microbatch_paced = true;
      r.sync.overlap = r.sync.every - 1;
      auto split_paced = PlanReplicas(planner, r);
      r.sync.overlap = 0;
      auto split_blocking = PlanReplicas(planner, r);
      const bool others =
          pricing.split_only || (fleet.ok() && paced.ok() && aligned.ok() && blocking.ok() &&
                                 mb_paced.ok() && mb_blocking.ok());
      if (!single.ok() || !others || !split_paced.ok() || !split_blocking.ok()) {
        std::printf(
            "| %d | %s | - | no plan fits: %s |\n", n, name.c_str(),
            std::string((single.ok() ? split_paced.status() : single.status()).message()).c_str());
        continue;
      }
      const double single_tps = single->estimate.tokens_per_second;
      // The compute bound of any replicated plan against the single pipeline: all sites'
      // FLOP/s over the single pipeline's sites'.
      double all_flops = 0, single_flops = 0;
      for (const auto& site : profiles.sites) all_flops += site.flops;
      for (const auto& st : single->stages) single_flops += profiles.Site(st.site)->flops;
      std::fprintf(stderr, "%d sites, %s: all sites' FLOP/s are %.1fx the single pipeline's\n", n,
                   name.c_str(), all_flops / single_flops);
      // The single pipeline and the plans split per replica replayed (replica_simulator.h) over
      // links whose bandwidth wanders +-30% every 5 s, with 5% compute jitter.
      SimulatorOptions so;
      so.steps = sim_steps;
      so.compute_jitter = 0.05;
      so.seed = seed;
      std::mt19937_64 rng(seed);
      const double horizon =
          sim_steps * std::max(single->estimate.step_seconds, split_blocking->step_seconds) * 2 +
          (sim_steps / std::max(1, every) + 2) * split_blocking->sync_seconds * 2 + 60;
      AddWanderingTraces(profiles, {*single}, horizon, &rng, &so);
      AddWanderingTraces(profiles, split_paced->replicas, horizon, &rng, &so);
      AddWanderingTraces(profiles, split_blocking->replicas, horizon, &rng, &so);
      double single_sim = 0;
      if (auto cm = planner.Model(r.request); cm.ok()) {
        // Between the first and the last step, as the replicas' steady rate below.
        if (auto sim = Simulate(*cm, single->stages, so); sim.ok() && sim_steps >= 3) {
          const double wall = sim->steps[static_cast<size_t>(sim_steps - 2)].end_seconds -
                              sim->steps[0].end_seconds;
          if (wall > 0) {
            single_sim = static_cast<double>(wl.w.microbatch_size) * wl.w.seq_len *
                         wl.w.microbatches * (sim_steps - 2) / wall;
          }
        }
      }
      const auto replay = [&](const ReplicaPlan& p, int overlap) {
        if (p.gossip) return 0.0;  // the simulator replays gathers and rings only
        SyncCostOptions sc = r.sync;
        sc.overlap = overlap;
        sc.reduce = p.ring ? SyncReduceCost::kRing : SyncReduceCost::kGather;  // fixed at submit
        auto sim = SimulateReplicas(profiles, wl.config, wl.w, p.replicas, sc, so, p.microbatches);
        if (!sim.ok()) {
          std::fprintf(stderr, "replay: %s\n", std::string(sim.status().message()).c_str());
          return 0.0;
        }
        return single_sim > 0 ? sim->steady_tokens_per_second() / single_sim : 0.0;
      };
      std::printf(
          "| %d | %s | single pipeline | 1 | %zu of %d (%.0f%%) | %.3f s | - | - | - | %.0f "
          "| 1.00x | 1.00x | - |\n",
          n, name.c_str(), single->stages.size(), n, 100.0 * single->stages.size() / n,
          single->estimate.step_seconds, single_tps);
      const auto row = [&](const std::string& plan, const std::string& replicas,
                           const ReplicaPlan& p, bool own_pace = false, double simulated = 0) {
        PrintReplicaRow(n, name,
                        plan + ", sync every " + std::to_string(every) +
                            (p.gossip ? ", gossip to " + std::to_string(pricing.fanout) + " (" +
                                            std::to_string(p.gossip_rounds) + " rounds to 1%)"
                             : p.ring ? ", ring"
                                      : ", gather"),
                        replicas, p, single_tps, own_pace, simulated);
      };
      const auto alike = [](const ReplicaPlan& p) {
        return std::to_string(p.replicas.size()) + " x " +
               std::to_string(p.replicas[0].stages.size());
      };
      const auto counts = [&](const ReplicaPlan& p) {
        const auto [lo, hi] = std::minmax_element(p.microbatches.begin(), p.microbatches.end());
        return " (" + std::to_string(p.microbatches.empty() ? 0 : *lo) + ".." +
               std::to_string(p.microbatches.empty() ? 0 : *hi) + " of " +
               std::to_string(wl.w.microbatches) + ")";
      };
      if (!pricing.split_only) {
        row("replicated", std::to_string(fleet->replicas.size()), *fleet);
        row("replicated, paced", std::to_string(paced->replicas.size()), *paced, true);
        row("replicated, aligned (one split)", alike(*aligned), *aligned);
        row("replicated, aligned, blocking syncs", alike(*blocking), *blocking);
        row("replicated, aligned, paced by microbatches" + counts(*mb_paced), alike(*mb_paced),
            *mb_paced);
        row("replicated, aligned, paced by microbatches" + counts(*mb_blocking) +
                ", blocking syncs",
            alike(*mb_blocking), *mb_blocking);
      }
      for (const auto* p : {&*split_paced, &*split_blocking}) {
        size_t s_lo = SIZE_MAX, s_hi = 0;
        for (const auto& rep : p->replicas) {
          s_lo = std::min(s_lo, rep.stages.size());
          s_hi = std::max(s_hi, rep.stages.size());
        }
        row("replicated, split per replica, paced by microbatches" + counts(*p) +
                (p == &*split_blocking ? ", blocking syncs" : ""),
            std::to_string(p->replicas.size()) + " (" + std::to_string(s_lo) + ".." +
                std::to_string(s_hi) + " stages)",
            *p, false, replay(*p, p == &*split_blocking ? 0 : every - 1));
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

int Calibrate(const std::string& job_path) {
  auto job = model::LoadJob(job_path, daemon::PipelineJobKeys());
  if (!job.ok()) {
    std::cerr << job.status().message() << "\n";
    return 1;
  }
  auto ops = kernels::MakeOps(job->backend, job->threads);
  if (!ops.ok()) {
    std::cerr << ops.status().message() << "\n";
    return 1;
  }
  CalibrationOptions o;
  o.batch_size = job->microbatch_size;
  o.seq_len = job->seq_len;
  o.repetitions = 5;
  auto cal = CalibrateLayer(ops->get(), job->model, o);
  if (!cal.ok()) {
    std::cerr << cal.status().message() << "\n";
    return 1;
  }
  std::printf(
      "# %s on %s (%d threads): %.3f ms forward, %.3f ms backward per layer and microbatch\n",
      job_path.c_str(), (*ops)->name().c_str(), job->threads, cal->forward_seconds * 1e3,
      cal->backward_seconds * 1e3);
  std::printf("  - {name: SITE, flops: %.4g, optimizer: %.4g}\n", cal->flops,
              cal->optimizer_params_per_second);
  return 0;
}

}  // namespace
}  // namespace longhaul::scheduler

int main(int argc, char** argv) {
  CLI::App app{"Scale study of the planner against even and bandwidth-oblivious placements"};
  std::vector<int> sizes = {8, 32, 128};
  std::vector<std::string> models = {"xl", "13b"};
  uint64_t seed = 1;
  int steps = 12;
  double budget = 20;
  std::string calibrate;
  app.add_option("--sites", sizes, "Topology sizes")->delimiter(',');
  app.add_option("--models", models, "xl (GPT-2 XL), 13b and/or llama8b (Llama 3 8B's shape)")
      ->delimiter(',');
  app.add_option("--seed", seed, "Topology seed")->capture_default_str();
  app.add_option("--steps", steps, "Simulated steps per placement")->capture_default_str();
  app.add_option("--time-budget", budget, "Planner time budget (s)")->capture_default_str();
  app.add_option("--calibrate-job", calibrate, "Time one layer of this job's shape instead");
  bool replicas = false;
  int every = 50;
  double bytes_per_value = 0.5625;
  app.add_flag("--replicas", replicas,
               "Compare replicated plans (pipeline replicas synced every --sync-every steps) "
               "with the single pipeline instead");
  app.add_option("--sync-every", every, "Inner steps per sync")->capture_default_str();
  app.add_option("--sync-bytes-per-value", bytes_per_value,
                 "Sync codec's bytes per value (q4 with per-64 scales: 0.5625; exact: 4)")
      ->capture_default_str();
  std::string reduce = "auto", uplink = "shared";
  bool split_only = false;
  int sim_steps = 101;  // the steady window, steps 2..100, holds two syncs of every 50
  app.add_option("--replay-steps", sim_steps,
                 "With --replicas: steps the single pipeline and the split plans are replayed "
                 "(the simulator, wandering links) to give the simulated column; its rate is "
                 "taken from the end of step 1 to the end of the second last, so a multiple of "
                 "--sync-every plus 1 holds whole sync periods")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--reduce", reduce,
                 "How syncs are priced: gather (every frame to every holder), ring (around the "
                 "replicas), auto (the cheaper, as a job's sync.reduce: auto), gossip (each "
                 "site to --fanout others over its fastest links; the rounds push-sum takes to "
                 "bring the replicas within 1% of their mean are in the plan column; no replay)")
      ->capture_default_str()
      ->check(CLI::IsMember({"gather", "ring", "auto", "gossip"}));
  int fanout = 2;
  app.add_option("--fanout", fanout, "With --reduce gossip: out-neighbours per round")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--uplink", uplink,
                 "shared: a site's sync flows at once share its uplink (its fastest link's "
                 "rate); own: each flow has its link to itself")
      ->capture_default_str()
      ->check(CLI::IsMember({"shared", "own"}));
  app.add_flag("--split-only", split_only,
               "With --replicas: only the plans split per replica (paced by microbatches), "
               "against the single pipeline");
  CLI11_PARSE(app, argc, argv);
  if (!calibrate.empty()) return longhaul::scheduler::Calibrate(calibrate);
  if (replicas) {
    longhaul::scheduler::SyncPricing pricing;
    pricing.reduce = reduce == "gather"   ? longhaul::scheduler::SyncReduceCost::kGather
                     : reduce == "ring"   ? longhaul::scheduler::SyncReduceCost::kRing
                     : reduce == "gossip" ? longhaul::scheduler::SyncReduceCost::kGossip
                                          : longhaul::scheduler::SyncReduceCost::kCheaper;
    pricing.fanout = fanout;
    pricing.shared_uplink = uplink == "shared";
    pricing.split_only = split_only;
    return longhaul::scheduler::ReplicaStudy(sizes, models, seed, budget, every, bytes_per_value,
                                             pricing, sim_steps);
  }
  return longhaul::scheduler::Study(sizes, models, seed, steps, budget);
}
