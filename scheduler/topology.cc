// Topology generators (see topology.h).
#include "scheduler/topology.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace longhaul::scheduler {
namespace {

// Regions and round-trip times in ms between them, rounded from public cloud inter-region
// latency tables (e.g. AWS: N. Virginia, Oregon, Montreal, Ireland, Frankfurt, Stockholm,
// Tokyo, Singapore, Mumbai, Sao Paulo, Sydney).
constexpr int kRegions = 11;
const char* const kRegionNames[kRegions] = {"use1",  "usw2",  "cac1", "euw1", "euc1", "eun1",
                                            "apne1", "apse1", "aps1", "sae1", "apse2"};
constexpr double kRttMs[kRegions][kRegions] = {
    // use1 usw2 cac1 euw1 euc1 eun1 apne1 apse1 aps1 sae1 apse2
    {0, 67, 15, 68, 90, 110, 145, 215, 185, 115, 195},      // use1
    {67, 0, 60, 125, 145, 155, 98, 165, 215, 175, 140},     // usw2
    {15, 60, 0, 70, 88, 100, 150, 210, 190, 125, 200},      // cac1
    {68, 125, 70, 0, 25, 40, 210, 165, 120, 180, 255},      // euw1
    {90, 145, 88, 25, 0, 25, 225, 155, 110, 200, 250},      // euc1
    {110, 155, 100, 40, 25, 0, 240, 170, 130, 215, 265},    // eun1
    {145, 98, 150, 210, 225, 240, 0, 70, 125, 255, 105},    // apne1
    {215, 165, 210, 165, 155, 170, 70, 0, 60, 320, 90},     // apse1
    {185, 215, 190, 120, 110, 130, 125, 60, 0, 300, 150},   // aps1
    {115, 175, 125, 180, 200, 215, 255, 320, 300, 0, 310},  // sae1
    {195, 140, 200, 255, 250, 265, 105, 90, 150, 310, 0},   // apse2
};

struct NodeKind {
  const char* name;
  double flops;  // sustained on GPT-2 layer shapes, all GPUs of the node
  double memory_gib;
  double optimizer_params_per_second;
  double weight;  // how often it occurs
};
// Peak dense bf16 x GPUs x a sustained fraction. Inside a site the stage runs data-parallel
// over the node's GPUs, so every GPU holds the whole fragment: a stage's memory limit is one
// GPU's memory (conservative: activations would split over the GPUs).
const NodeKind kKinds[] = {
    {"8xH100", 8 * 989e12 * 0.40, 80, 8 * 3e10, 0.25},
    {"8xA100", 8 * 312e12 * 0.45, 80, 8 * 1.5e10, 0.35},
    {"8xV100", 8 * 125e12 * 0.40, 32, 8 * 0.7e10, 0.25},
    {"4xL4", 4 * 121e12 * 0.35, 24, 4 * 0.25e10, 0.15},
};

}  // namespace

Profiles RandomMesh(const RandomMeshOptions& o) {
  std::mt19937_64 rng(o.seed);
  auto log_uniform = [&](double lo, double hi) {
    return std::exp(std::uniform_real_distribution<double>(std::log(lo), std::log(hi))(rng));
  };
  Profiles p;
  for (int i = 0; i < o.sites; ++i) {
    p.sites.push_back(
        {absl::StrCat("s", i), log_uniform(o.min_flops, o.max_flops), o.memory_bytes, 0});
  }
  for (int a = 0; a < o.sites; ++a) {
    for (int b = a + 1; b < o.sites; ++b) {
      const double rtt = std::uniform_real_distribution<double>(o.min_rtt, o.max_rtt)(rng);
      p.links.push_back(
          {p.sites[a].name, p.sites[b].name, log_uniform(o.min_bandwidth, o.max_bandwidth), rtt});
      p.links.push_back(
          {p.sites[b].name, p.sites[a].name, log_uniform(o.min_bandwidth, o.max_bandwidth), rtt});
    }
  }
  return p;
}

Profiles RegionTopology(const RegionTopologyOptions& o) {
  std::mt19937_64 rng(o.seed);
  const int regions = std::clamp(o.regions, 1, kRegions);
  std::discrete_distribution<int> kind(
      {kKinds[0].weight, kKinds[1].weight, kKinds[2].weight, kKinds[3].weight});
  Profiles p;
  std::vector<int> region_of;
  std::vector<int> count(regions, 0);
  for (int i = 0; i < o.sites; ++i) {
    // Every region gets a site first; the rest land in regions at random.
    const int r = i < regions ? i : static_cast<int>(rng() % regions);
    const NodeKind& k = kKinds[kind(rng)];
    p.sites.push_back({absl::StrCat(kRegionNames[r], "-", count[r]++), k.flops,
                       static_cast<int64_t>(k.memory_gib * (1ll << 30)),
                       k.optimizer_params_per_second});
    region_of.push_back(r);
  }
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  std::uniform_real_distribution<double> inter(o.min_inter_bandwidth, o.max_inter_bandwidth);
  for (int a = 0; a < o.sites; ++a) {
    for (int b = 0; b < o.sites; ++b) {
      if (a == b) continue;
      const int ra = region_of[a], rb = region_of[b];
      double bw, rtt;
      if (ra == rb) {
        bw = o.intra_bandwidth * jitter(rng);
        rtt = o.intra_rtt * jitter(rng);
      } else {
        rtt = kRttMs[ra][rb] / 1e3;
        bw = inter(rng) / (1 + rtt / 0.1);
      }
      p.links.push_back({p.sites[a].name, p.sites[b].name, bw, rtt});
    }
  }
  // Both directions of a pair share one RTT.
  for (LinkProfile& l : p.links) {
    if (const LinkProfile* back = p.Link(l.to, l.from); back && l.from > l.to) {
      l.rtt_seconds = back->rtt_seconds;
    }
  }
  return p;
}

Profiles UniformLinks(const Profiles& profiles) {
  Profiles p = profiles;
  double bw = 0, rtt = 0;
  for (const LinkProfile& l : p.links) bw += l.bandwidth_bytes_per_second, rtt += l.rtt_seconds;
  if (!p.links.empty()) bw /= p.links.size(), rtt /= p.links.size();
  for (LinkProfile& l : p.links) l.bandwidth_bytes_per_second = bw, l.rtt_seconds = rtt;
  return p;
}

std::vector<std::string> SiteNames(const Profiles& profiles) {
  std::vector<std::string> names;
  for (const SiteProfile& s : profiles.sites) names.push_back(s.name);
  return names;
}

std::vector<std::string> SortedSiteNames(const Profiles& profiles) {
  std::vector<std::string> names = SiteNames(profiles);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace longhaul::scheduler
