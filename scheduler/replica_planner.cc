// Replicated placement and its price (see replica_planner.h).
#include "scheduler/replica_planner.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "fleet/gossip.h"
#include "fleet/sync_slices.h"
#include "model/layout.h"

namespace longhaul::scheduler {
namespace {

// Parameters of the layers [begin, end) a stage holds, with the embeddings its place brings
// (wte and wpe on the first stage, wte's copy and the final layernorm on the last).
double StageParams(const model::ModelConfig& config, int begin, int end) {
  return static_cast<double>(model::FragmentLayout(config, begin, end).total());
}

// The parameters two stages of different replicas hold in common: their layers' overlap,
// with the embeddings both hold.
// `tied_at_last`: a tied head's copy of wte counts between last stages (gather and ring sync it
// there); gossip syncs it between first stages only (the last stage replays the first's rounds,
// daemon/job/sync/tied_round.h), so its pricing passes false.
double SharedParams(const model::ModelConfig& config, const StagePlan& a, const StagePlan& b,
                    bool tied_at_last = true) {
  const int begin = std::max(a.layer_begin, b.layer_begin);
  const int end = std::min(a.layer_end, b.layer_end);
  double shared = 0;
  if (begin < end) {
    const model::ParameterLayout layout(config);
    for (int i = 0; i < model::kNumTensors; ++i) {
      const auto t = static_cast<model::Tensor>(i);
      if (model::IsPerLayer(t)) {
        shared += static_cast<double>(layout.offset(t, end) - layout.offset(t, begin));
      }
    }
  }
  const int L = config.num_layers;
  const model::ParameterLayout layout(config);
  const bool first = a.layer_begin == 0 && b.layer_begin == 0;
  const bool last = a.layer_end == L && b.layer_end == L;
  if (first) shared += layout.size(model::Tensor::kWte) + layout.size(model::Tensor::kWpe);
  // The standard model's last stage holds a copy of wte (its head); the subspace-cut
  // variant's holds the untied head instead (size 0 in the standard model).
  if (tied_at_last && last && !first && model::TiedHead(config)) {
    shared += layout.size(model::Tensor::kWte);
  }
  if (last) {
    shared += layout.size(model::Tensor::kLnfw) + layout.size(model::Tensor::kLnfb) +
              layout.size(model::Tensor::kHead);
  }
  return shared;
}

struct SyncPrice {
  double seconds = 0, bytes = 0;
  std::string bottleneck;  // "FROM -> TO" of the slowest site's slowest flow
};

// Each site's fastest outbound link: what its uplink carries at most.
std::map<std::string, double> Uplinks(const Profiles& profiles) {
  std::map<std::string, double> uplink;
  for (const LinkProfile& l : profiles.links) {
    uplink[l.from] = std::max(uplink[l.from], l.bandwidth_bytes_per_second);
  }
  return uplink;
}

enum class Reduce { kGather, kRing, kGossip };

// The bandwidth from replica r's sites to replica q's: the slowest link between two of their
// stages that share parameters (0 where one is missing).
double ReplicaLink(const Profiles& profiles, const model::ModelConfig& model, const PlanResult& r,
                   const PlanResult& q) {
  double slowest = -1;
  for (const StagePlan& s : r.stages) {
    for (const StagePlan& d : q.stages) {
      if (SharedParams(model, s, d) <= 0) continue;
      const LinkProfile* link = profiles.Link(s.site, d.site);
      const double b = link == nullptr ? 0.0 : link->bandwidth_bytes_per_second;
      slowest = slowest < 0 ? b : std::min(slowest, b);
    }
  }
  return std::max(0.0, slowest);
}

// For gossip: by replica, the `fanout` other replicas its fastest links reach.
std::vector<std::vector<size_t>> GossipTargets(const Profiles& profiles,
                                               const model::ModelConfig& model,
                                               const std::vector<PlanResult>& replicas,
                                               int fanout) {
  const size_t n = replicas.size();
  std::vector<std::vector<size_t>> targets(n);
  for (size_t r = 0; r < n; ++r) {
    std::vector<std::pair<double, size_t>> by_speed;
    for (size_t q = 0; q < n; ++q) {
      if (q == r) continue;
      const double b = ReplicaLink(profiles, model, replicas[r], replicas[q]);
      if (b > 0) by_speed.push_back({-b, q});
    }
    std::sort(by_speed.begin(), by_speed.end());
    for (size_t k = 0; k < by_speed.size() && k < static_cast<size_t>(std::max(1, fanout)); ++k) {
      targets[r].push_back(by_speed[k].second);
    }
  }
  return targets;
}

// One sync of `replicas` gathered, around the ring (replica order) or one gossip round, as
// replica_planner.h describes; `uplink`: Uplinks (empty: flows do not share them).
SyncPrice PriceSync(const Profiles& profiles, const model::ModelConfig& model,
                    const std::vector<PlanResult>& replicas, const SyncCostOptions& sync,
                    const std::map<std::string, double>& uplink, Reduce reduce) {
  SyncPrice price;
  const size_t n = replicas.size();
  if (n < 2) return price;
  const bool ring = reduce == Reduce::kRing;
  const std::vector<std::vector<size_t>> gossip_to =
      reduce == Reduce::kGossip ? GossipTargets(profiles, model, replicas, sync.fanout)
                                : std::vector<std::vector<size_t>>{};
  // A ring member sends 2 (N - 1) / N of its contribution, in 2 (N - 1) hops.
  const double share = ring ? 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) : 1.0;
  const double hops = ring ? 2.0 * static_cast<double>(n - 1) : 1.0;
  for (size_t r = 0; r < n; ++r) {
    if (reduce == Reduce::kGossip && gossip_to[r].empty()) {
      // No link up to any other replica: its contribution never leaves; priced as no link.
      price.seconds = std::max(price.seconds, 1e30);
      price.bottleneck = replicas[r].stages.empty() ? "" : replicas[r].stages[0].site + " -> none";
      continue;
    }
    for (const StagePlan& s : replicas[r].stages) {
      double slowest_flow = 0, total_bytes = 0, latency = 0;
      std::string to;
      // One flow of `bytes` from s to `site`, `link_hops` round trips of latency.
      auto flow_to = [&](const std::string& site, double bytes, double link_hops) {
        price.bytes += bytes;
        total_bytes += bytes;
        const LinkProfile* link = profiles.Link(s.site, site);
        const double flow = link == nullptr || link->bandwidth_bytes_per_second <= 0
                                ? 1e30
                                : bytes / link->bandwidth_bytes_per_second;
        latency = std::max(latency, link == nullptr ? 0.0 : link->rtt_seconds * link_hops);
        if (flow >= slowest_flow) {
          slowest_flow = flow;
          to = site;
        }
      };
      for (size_t q = 0; q < n; ++q) {
        if (q == r || (ring && q != (r + 1) % n)) continue;
        if (reduce == Reduce::kGossip &&
            std::find(gossip_to[r].begin(), gossip_to[r].end(), q) == gossip_to[r].end()) {
          continue;
        }
        for (const StagePlan& d : replicas[q].stages) {
          const double bytes =
              SharedParams(model, s, d, reduce != Reduce::kGossip) * sync.bytes_per_value * share;
          if (bytes > 0) flow_to(d.site, bytes, hops);
        }
      }
      if (reduce == Reduce::kGossip && s.layer_begin == 0 && model::TiedHead(model) &&
          replicas[r].stages.size() > 1) {
        // The first stage forwards the tied embedding's frames it took this round, one per
        // in-neighbour, to its replica's last stage (which replays the round).
        const StagePlan& last = replicas[r].stages.back();
        size_t in = 0;
        for (size_t q = 0; q < n; ++q) {
          in += q != r &&
                std::find(gossip_to[q].begin(), gossip_to[q].end(), r) != gossip_to[q].end();
        }
        const double bytes =
            static_cast<double>(model::ParameterLayout(model).size(model::Tensor::kWte)) *
            sync.bytes_per_value * static_cast<double>(in);
        if (bytes > 0) flow_to(last.site, bytes, 1.0);
      }
      if (to.empty()) continue;
      double seconds = slowest_flow;
      if (const auto u = uplink.find(s.site); u != uplink.end() && u->second > 0) {
        seconds = std::max(seconds, total_bytes / u->second);
      }
      seconds += latency;
      if (seconds > price.seconds) {
        price.seconds = seconds;
        price.bottleneck = s.site + " -> " + to;
      }
    }
  }
  return price;
}

}  // namespace

std::vector<PlanResult> OrderForRing(const Profiles& profiles, const model::ModelConfig& model,
                                     std::vector<PlanResult> replicas,
                                     std::vector<int>* microbatches) {
  const size_t n = replicas.size();
  if (n < 3) return replicas;
  // hop[a][b]: seconds per byte of shared parameters on the slowest flow from a to b.
  std::vector<std::vector<double>> hop(n, std::vector<double>(n, 0.0));
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a == b) continue;
      for (const StagePlan& s : replicas[a].stages) {
        for (const StagePlan& d : replicas[b].stages) {
          const double shared = SharedParams(model, s, d);
          if (shared <= 0) continue;
          const LinkProfile* link = profiles.Link(s.site, d.site);
          const double cost = link == nullptr || link->bandwidth_bytes_per_second <= 0
                                  ? 1e30
                                  : shared / link->bandwidth_bytes_per_second;
          hop[a][b] = std::max(hop[a][b], cost);
        }
      }
    }
  }
  // A tour's cost: its slowest hop, then the sum of its hops.
  auto cost = [&](const std::vector<size_t>& t) {
    double worst = 0, sum = 0;
    for (size_t i = 0; i < n; ++i) {
      const double h = hop[t[i]][t[(i + 1) % n]];
      worst = std::max(worst, h);
      sum += h;
    }
    return std::make_pair(worst, sum);
  };
  std::vector<size_t> tour = {0};
  std::vector<bool> used(n, false);
  used[0] = true;
  while (tour.size() < n) {
    size_t next = n;
    for (size_t b = 0; b < n; ++b) {
      if (!used[b] && (next == n || hop[tour.back()][b] < hop[tour.back()][next])) next = b;
    }
    used[next] = true;
    tour.push_back(next);
  }
  auto best = cost(tour);
  for (bool improved = true; improved;) {
    improved = false;
    for (size_t i = 1; i + 1 < n; ++i) {
      for (size_t j = i + 1; j < n; ++j) {
        std::vector<size_t> t = tour;
        std::reverse(t.begin() + static_cast<std::ptrdiff_t>(i),
                     t.begin() + static_cast<std::ptrdiff_t>(j) + 1);
        const auto c = cost(t);
        if (c < best) {
          best = c;
          tour = std::move(t);
          improved = true;
        }
      }
    }
  }
  std::vector<PlanResult> ordered;
  std::vector<int> counts;
  for (size_t i : tour) {
    ordered.push_back(std::move(replicas[i]));
    if (microbatches != nullptr && i < microbatches->size()) counts.push_back((*microbatches)[i]);
  }
  if (microbatches != nullptr && !microbatches->empty()) *microbatches = std::move(counts);
  return ordered;
}

ReplicaPlan PriceReplicas(const Profiles& profiles, const model::ModelConfig& model,
                          const PipelineWorkload& workload, std::vector<PlanResult> replicas,
                          const SyncCostOptions& sync, std::vector<int> microbatches) {
  ReplicaPlan p;
  p.replicas = std::move(replicas);
  p.microbatches = std::move(microbatches);
  for (const PlanResult& r : p.replicas) {
    p.sites_used += static_cast<int>(r.stages.size());
    p.replica_step_seconds = std::max(p.replica_step_seconds, r.estimate.step_seconds);
  }
  // Rings only where every replica holds the tied embedding as the others do (one stage each,
  // or two or more each: daemon/job/sync/sync_routes.h RingsAgree); else the job gathers.
  bool single = false, multi = false;
  for (const PlanResult& r : p.replicas) (r.stages.size() == 1 ? single : multi) = true;
  const bool rings = !(single && multi);
  const std::map<std::string, double> uplink = sync.shared_uplink && p.replicas.size() > 1
                                                   ? Uplinks(profiles)
                                                   : std::map<std::string, double>{};
  const SyncPrice gather = PriceSync(profiles, model, p.replicas, sync, uplink, Reduce::kGather);
  const SyncPrice ring =
      rings ? PriceSync(profiles, model, p.replicas, sync, uplink, Reduce::kRing) : SyncPrice{};
  if (sync.reduce != SyncReduceCost::kRing || !rings) p.gather_seconds = gather.seconds;
  if (sync.reduce != SyncReduceCost::kGather && sync.reduce != SyncReduceCost::kGossip && rings) {
    p.ring_seconds = ring.seconds;
  }
  p.ring = rings && (sync.reduce == SyncReduceCost::kRing ||
                     (sync.reduce == SyncReduceCost::kCheaper && ring.seconds < gather.seconds));
  SyncPrice gossip;
  if (sync.reduce == SyncReduceCost::kGossip && p.replicas.size() > 1) {
    p.gossip = true;
    gossip = PriceSync(profiles, model, p.replicas, sync, uplink, Reduce::kGossip);
    p.gossip_seconds = gossip.seconds;
    const size_t n = p.replicas.size();
    std::vector<std::vector<double>> links(n, std::vector<double>(n, 0.0));
    for (size_t r = 0; r < n; ++r) {
      for (size_t q = 0; q < n; ++q) {
        if (q != r) links[r][q] = ReplicaLink(profiles, model, p.replicas[r], p.replicas[q]);
      }
    }
    p.gossip_rounds = fleet::RoundsToConsensus(links, std::max(1, sync.fanout), 0, 0.01, 1000);
  }
  const SyncPrice& chosen = p.gossip ? gossip : p.ring ? ring : gather;
  p.sync_seconds = chosen.seconds;
  p.sync_bytes = chosen.bytes;
  p.sync_bottleneck = chosen.bottleneck;
  const int every = std::max(1, sync.every);
  const int behind = std::clamp(sync.overlap, 0, every);
  // A staggered round: one sync per phase, each its share of the model's parameters
  // (fleet::PhaseShares, the embeddings' phase the largest; the latency scaled with it, an
  // approximation), each hidden behind its own `behind` steps.
  const std::vector<double> shares =
      fleet::PhaseShares(model::ParameterLayout(model), std::clamp(sync.stagger, 1, every));
  const double hidden = behind * p.replica_step_seconds;
  double exposed_round = 0, exposed_paced = 0;
  for (double share : shares) {
    exposed_round += std::max(0.0, p.sync_seconds * share - hidden);
  }
  // A warm-up's steps each sync, blocking, the whole model (fleet::LocalSyncAt).
  const double warm = std::clamp(sync.warmup_fraction, 0.0, 1.0);
  p.exposed_sync_per_step = (1 - warm) * exposed_round / every + warm * p.sync_seconds;
  p.step_seconds = p.replica_step_seconds + p.exposed_sync_per_step;
  double all_microbatches = 0;
  for (size_t r = 0; r < p.replicas.size(); ++r) {
    all_microbatches += r < p.microbatches.size() ? p.microbatches[r] : workload.microbatches;
  }
  const double tokens =
      static_cast<double>(workload.microbatch_size) * workload.seq_len * all_microbatches;
  p.tokens_per_second = p.step_seconds > 0 ? tokens / p.step_seconds : 0;
  double fastest = 0, paced = 0;
  for (const PlanResult& r : p.replicas) {
    if (fastest == 0 || r.estimate.step_seconds < fastest) fastest = r.estimate.step_seconds;
  }
  const double interval = every * fastest;  // wall time between syncs
  for (double share : shares) {
    exposed_paced += std::max(0.0, p.sync_seconds * share - behind * fastest);
  }
  const double exposed = exposed_paced;
  for (const PlanResult& r : p.replicas) {
    if (r.estimate.step_seconds > 0) paced += r.estimate.tokens_per_step / r.estimate.step_seconds;
  }
  // Per step of the fastest: its step and its share of the exposed syncs, in the warm-up every
  // step's whole sync.
  const double per_step =
      (1 - warm) * (interval + exposed) / every + warm * (fastest + p.sync_seconds);
  p.paced_tokens_per_second = interval > 0 && per_step > 0 ? paced * fastest / per_step : 0;
  return p;
}

namespace {

// `sites` by FLOP/s, most first (stable: ties keep their order); a site without a profile
// counts as 0.
std::vector<std::string> ByFlops(const Profiles& profiles, std::vector<std::string> sites) {
  auto flops = [&](const std::string& s) {
    const SiteProfile* p = profiles.Site(s);
    return p == nullptr ? 0.0 : p->flops;
  };
  std::stable_sort(sites.begin(), sites.end(),
                   [&](const std::string& a, const std::string& b) { return flops(a) > flops(b); });
  return sites;
}

// Replicas formed greedily: the fastest site left and its `cap` - 1 best-connected sites left
// are the candidates of the next pipeline (all sites left when cap is 0); the planner picks
// among them; the sites it uses are taken. A candidate set where nothing fits drops its seed.
std::vector<PlanResult> FormReplicas(const Planner& planner, const ReplicaPlanRequest& r,
                                     size_t cap, Status* first_error) {
  const Profiles& profiles = planner.profiles();
  std::vector<std::string> left = ByFlops(profiles, r.request.sites);
  std::vector<PlanResult> found;
  while (!left.empty() &&
         (r.max_replicas <= 0 || static_cast<int>(found.size()) < r.max_replicas)) {
    std::vector<std::string> candidates = left;
    if (cap > 0 && candidates.size() > cap) {
      const std::string seed = left[0];
      auto bandwidth = [&](const std::string& to) {
        const LinkProfile* l = profiles.Link(seed, to);
        return l == nullptr ? 0.0 : l->bandwidth_bytes_per_second;
      };
      std::stable_sort(
          candidates.begin() + 1, candidates.end(),
          [&](const std::string& a, const std::string& b) { return bandwidth(a) > bandwidth(b); });
      candidates.resize(cap);
    }
    PlacementRequest request = r.request;
    request.sites = candidates;
    auto plan = planner.Plan(request);
    std::set<std::string> used;
    if (plan.ok() && plan->estimate.fits_memory) {
      for (const StagePlan& s : plan->stages) used.insert(s.site);
      found.push_back(*std::move(plan));
    } else {
      if (found.empty() && first_error->ok()) {
        *first_error =
            plan.ok() ? absl::ResourceExhaustedError("the model does not fit") : plan.status();
      }
      if (cap == 0) break;  // all sites left were candidates: nothing more fits
      used.insert(candidates[0]);
    }
    std::vector<std::string> rest;
    for (const std::string& s : left) {
      if (!used.count(s)) rest.push_back(s);
    }
    left = std::move(rest);
  }
  return found;
}

}  // namespace

StatusOr<std::vector<PlanResult>> AlignReplicas(const Planner& planner,
                                                const PlacementRequest& request,
                                                const std::vector<PlanResult>& replicas,
                                                bool keep_all, bool paced) {
  if (replicas.empty()) return absl::InvalidArgumentError("aligning replicas: none given");
  ASSIGN_OR_RETURN(const CostModel model, planner.Model(request));
  // The replicas under one split: each in its own planned order or with its sites matched by
  // FLOP/s to the stages by layer count, the faster; a replica with fewer stages, or that fits
  // its sites' memory in neither, is left out.
  auto align = [&](const std::vector<std::pair<int, int>>& split) {
    const size_t S = split.size();
    std::vector<size_t> by_layers(S);
    for (size_t i = 0; i < S; ++i) by_layers[i] = i;
    std::stable_sort(by_layers.begin(), by_layers.end(), [&](size_t a, size_t b) {
      return split[a].second - split[a].first > split[b].second - split[b].first;
    });
    std::vector<PlanResult> aligned;
    for (const PlanResult& r : replicas) {
      if (r.stages.size() < S) continue;
      // The replica's S sites of most FLOP/s, in its planned order.
      std::vector<std::string> sites;
      for (const StagePlan& s : r.stages) sites.push_back(s.site);
      std::vector<std::string> fastest = ByFlops(planner.profiles(), sites);
      fastest.resize(S);
      std::vector<std::string> kept;
      for (const auto& s : sites) {
        if (std::find(fastest.begin(), fastest.end(), s) != fastest.end()) kept.push_back(s);
      }
      std::vector<std::string> matched(S);
      for (size_t k = 0; k < S; ++k) matched[by_layers[k]] = fastest[k];
      std::optional<PlanResult> chosen;
      for (const std::vector<std::string>* order : {&kept, &matched}) {
        PlanResult candidate;
        candidate.method = "aligned";
        for (size_t i = 0; i < S; ++i) {
          candidate.stages.push_back({(*order)[i], split[i].first, split[i].second});
        }
        auto e = model.Estimate(candidate.stages);
        if (!e.ok() || !e->fits_memory) continue;
        candidate.estimate = *std::move(e);
        if (!chosen || candidate.estimate.step_seconds < chosen->estimate.step_seconds) {
          chosen = std::move(candidate);
        }
      }
      if (chosen) aligned.push_back(*std::move(chosen));
    }
    return aligned;
  };
  // The splits to try: each replica's own, and the even one of each stage count.
  std::vector<std::vector<std::pair<int, int>>> splits;
  auto add = [&](const std::vector<StagePlan>& stages) {
    std::vector<std::pair<int, int>> split;
    for (const StagePlan& s : stages) split.push_back({s.layer_begin, s.layer_end});
    if (std::find(splits.begin(), splits.end(), split) == splits.end()) splits.push_back(split);
  };
  for (const PlanResult& r : replicas) {
    add(r.stages);
    PlacementRequest even = request;
    even.sites.clear();
    for (const StagePlan& s : r.stages) even.sites.push_back(s.site);
    if (auto stages = MakeEvenSplitPlacer()->Place(even); stages.ok()) add(*stages);
  }
  // The best: the most replicas per second of the slowest one's step (each replica trains
  // the same tokens per step; the sync is priced by the caller).
  std::vector<PlanResult> best;
  double best_rate = 0;
  for (const auto& split : splits) {
    std::vector<PlanResult> aligned = align(split);
    if (aligned.empty() || (keep_all && aligned.size() != replicas.size())) continue;
    double step = 0, steps_per_second = 0;
    for (const PlanResult& r : aligned) {
      step = std::max(step, r.estimate.step_seconds);
      if (r.estimate.step_seconds > 0) steps_per_second += 1 / r.estimate.step_seconds;
    }
    const double rate = paced      ? steps_per_second
                        : step > 0 ? static_cast<double>(aligned.size()) / step
                                   : 0;
    if (best.empty() || rate > best_rate) {
      best = std::move(aligned);
      best_rate = rate;
    }
  }
  if (best.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("aligning ", replicas.size(),
                     " replicas to one split: under every split tried no replica fits its "
                     "sites' memory"));
  }
  return best;
}

StatusOr<std::vector<int>> PaceReplicas(const Planner& planner, const PlacementRequest& request,
                                        std::vector<PlanResult>* replicas) {
  const int M = std::max(1, request.workload.microbatches);
  const size_t R = replicas->size();
  std::map<int, CostModel> models;                        // by microbatch count
  std::vector<std::map<int, StepEstimate>> estimates(R);  // by replica, then count
  auto estimate = [&](size_t r, int m) -> StatusOr<StepEstimate> {
    if (auto e = estimates[r].find(m); e != estimates[r].end()) return e->second;
    auto it = models.find(m);
    if (it == models.end()) {
      PlacementRequest at = request;
      at.workload.microbatches = m;
      ASSIGN_OR_RETURN(CostModel model, planner.Model(at));
      it = models.emplace(m, std::move(model)).first;
    }
    ASSIGN_OR_RETURN(const StepEstimate e, it->second.Estimate((*replicas)[r].stages));
    return estimates[r].emplace(m, e).first->second;
  };
  // Each replica's step at M is a candidate pace (the slowest's: every replica trains M, in
  // lockstep); under a pace every replica trains the most microbatches that fit it. The pace
  // with the most microbatches per second of the slowest step wins.
  std::vector<int> best;
  double best_rate = -1;
  for (size_t t = 0; t < R; ++t) {
    ASSIGN_OR_RETURN(const StepEstimate at_m, estimate(t, M));
    const double target = at_m.step_seconds;
    std::vector<int> counts;
    double slowest = 0, total = 0;
    for (size_t r = 0; r < R; ++r) {
      // The step grows with the microbatches: the most that fit the pace, by bisection.
      int lo = 1, hi = M;
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        ASSIGN_OR_RETURN(const StepEstimate e, estimate(r, mid));
        if (e.step_seconds <= target * (1 + 1e-9)) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      ASSIGN_OR_RETURN(const StepEstimate e, estimate(r, lo));
      slowest = std::max(slowest, e.step_seconds);
      total += lo;
      counts.push_back(lo);
    }
    const double rate = slowest > 0 ? total / slowest : 0;
    if (rate > best_rate) {
      best_rate = rate;
      best = std::move(counts);
    }
  }
  for (size_t r = 0; r < R; ++r) {
    ASSIGN_OR_RETURN((*replicas)[r].estimate, estimate(r, best[r]));
  }
  return best;
}

StatusOr<ReplicaPlan> PlanReplicas(const Planner& planner, const ReplicaPlanRequest& r) {
  // Candidate sets of up to 1, 2, 3, 4, 6 and 8 sites per replica (small enough for the
  // planner's exact search), and all sites left (the single-pipeline planner's own choice).
  ReplicaPlan best;
  Status error;
  bool any = false;
  // Each replica at its own pace: chosen by paced tokens/s; paced by microbatches, the replicas
  // run in lockstep at those counts: by tokens/s.
  const bool by_paced = r.paced && !r.aligned && !r.microbatch_paced;
  for (size_t cap : {size_t{1}, size_t{2}, size_t{3}, size_t{4}, size_t{6}, size_t{8}, size_t{0}}) {
    if (cap > r.request.sites.size()) continue;
    const std::vector<PlanResult> found = FormReplicas(planner, r, cap, &error);
    // The best count of the replicas found (best first): more replicas add tokens, but
    // also a slower slowest replica and a sync over more, and farther, sites.
    for (size_t n = 1; n <= found.size(); ++n) {
      if (r.exact_count && static_cast<int>(n) != r.max_replicas) continue;
      std::vector<PlanResult> replicas(found.begin(), found.begin() + n);
      std::vector<int> microbatches;
      if (r.aligned) {
        auto aligned = AlignReplicas(planner, r.request, replicas, r.exact_count, r.paced);
        if (!aligned.ok()) {
          if (error.ok()) error = aligned.status();
          continue;
        }
        replicas = *std::move(aligned);
        if (r.paced) {
          auto paced = PaceReplicas(planner, r.request, &replicas);
          if (!paced.ok()) {
            if (error.ok()) error = paced.status();
            continue;
          }
          microbatches = *std::move(paced);
        }
      } else if (r.microbatch_paced) {
        auto paced = PaceReplicas(planner, r.request, &replicas);
        if (!paced.ok()) {
          if (error.ok()) error = paced.status();
          continue;
        }
        microbatches = *std::move(paced);
      }
      ReplicaPlan p = PriceReplicas(planner.profiles(), r.request.model, r.request.workload,
                                    replicas, r.sync, microbatches);
      // Around a ring, the order whose slowest hop is fastest, where it prices faster.
      if ((r.sync.reduce == SyncReduceCost::kRing || r.sync.reduce == SyncReduceCost::kCheaper) &&
          replicas.size() >= 3) {
        std::vector<int> counts = microbatches;
        std::vector<PlanResult> ordered =
            OrderForRing(planner.profiles(), r.request.model, replicas, &counts);
        ReplicaPlan q = PriceReplicas(planner.profiles(), r.request.model, r.request.workload,
                                      std::move(ordered), r.sync, std::move(counts));
        if (by_paced ? q.paced_tokens_per_second > p.paced_tokens_per_second
                     : q.step_seconds < p.step_seconds) {
          p = std::move(q);
        }
      }
      any = true;
      if (by_paced ? p.paced_tokens_per_second > best.paced_tokens_per_second
                   : p.tokens_per_second > best.tokens_per_second) {
        best = std::move(p);
      }
    }
  }
  if (!any) {
    if (r.exact_count && error.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat("no ", r.max_replicas,
                                                       " replicas fit on the ",
                                                       r.request.sites.size(), " candidate sites"));
    }
    return error.ok() ? absl::ResourceExhaustedError("no pipeline fits") : error;
  }
  return best;
}

}  // namespace longhaul::scheduler
