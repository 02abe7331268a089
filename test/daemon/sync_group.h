// SyncGroup: the sync groups of a job's pipeline replicas in one process, for unit tests of
// SyncExchange (daemon/job/sync/sync_exchange.h): every stage with its own inbox, a LinkSender
// to every stage of the other replicas over a FakeLink (fake_link.h) that files what it
// carries in the receiver's inbox, its contribution, and a SyncExchange; and the sums a test
// expects of them, added here from the contributions (gathered, and around rings).
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/job/sync/sync_exchange.h"
#include "daemon/job/sync/sync_routes.h"
#include "fleet/sync_ring.h"
#include "model/config.h"
#include "model/layout.h"
#include "test/daemon/fake_link.h"

namespace longhaul::testing {

inline constexpr uint32_t kSyncAttempt = 1;
inline constexpr int kSyncLayers = 2;

inline std::string SyncSite(int stage) {
  static const char* const kSites[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"};
  return kSites[stage];
}

// Two layers of 8 channels: a stage's fragment is a few thousand floats in 16 or so slices.
inline model::ModelConfig SyncConfig() { return model::MakeConfig(kSyncLayers, 8, 2, 16, 8); }

inline bool SameBits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct SyncGroupOptions {
  int replicas = 2;
  int stages = 1;  // per replica, the model's layers split alike
  bool ring = false;
  std::string codec = "exact";
  std::vector<bool> live;  // by replica (empty: all live)
  int stagger = 1;
  FileEnv* file_env = FileEnv::Default();  // every SyncExchange's clock
};

// `replicas` pipelines of `stages` stages, flat stage i on site SyncSite(i), attempt
// kSyncAttempt; a dropped replica's stages have an inbox and senders but no SyncExchange.
struct SyncGroup {
  explicit SyncGroup(SyncGroupOptions options) : o(std::move(options)) {
    const int n = o.replicas * o.stages;
    grid = daemon::StageGrid::Of(o.replicas, n);
    for (int i = 0; i < n; ++i) {
      const int p = grid.position(i);
      grid.layers.emplace_back(p * kSyncLayers / o.stages, (p + 1) * kSyncLayers / o.stages);
    }
    live = o.live.empty() ? std::vector<bool>(static_cast<size_t>(o.replicas), true) : o.live;
    for (int i = 0; i < n; ++i) {
      inboxes.push_back(std::make_unique<daemon::Inbox>(64 << 20));
      inboxes.back()->StartAttempt(kSyncAttempt, 0);
      monitors.push_back(std::make_unique<daemon::LinkMonitor>(SyncSite(i)));
    }
    for (int i = 0; i < n; ++i) {
      for (int d = 0; d < n; ++d) {
        if (grid.replica(i) == grid.replica(d)) continue;
        auto link = std::make_unique<FakeLink>(SyncSite(d));
        link->OnDeliver(IntoInbox(inboxes[d].get()));
        daemon::LinkSenderOptions so;
        so.site = SyncSite(i);
        so.peer = SyncSite(d);
        so.workers = 2;
        so.max_workers = 4;
        senders[{i, d}] = std::make_unique<daemon::LinkSender>(so, link.get(), monitors[i].get(),
                                                               spdlog::default_logger());
        links[{i, d}] = std::move(link);
      }
    }
    const model::ModelConfig config = SyncConfig();
    for (int i = 0; i < n; ++i) {
      routes.push_back(daemon::SyncRoutes(grid, config, i, o.stagger));
      const auto& [begin, end] = grid.layers[static_cast<size_t>(i)];
      values.push_back(Contribution(grid.replica(i), grid.position(i),
                                    model::FragmentLayout(config, begin, end).total()));
    }
    for (int i = 0; i < n; ++i) {
      if (!is_live(i)) {
        x.emplace_back();  // a dropped replica's stages sit the attempt out
        continue;
      }
      auto made = daemon::SyncExchange::Create(Options(i));
      INFO(made.status().ToString());
      REQUIRE(made.ok());
      x.push_back(std::move(*made));
    }
  }
  ~SyncGroup() {
    stop = true;
    x.clear();  // their receivers end within a heartbeat
    for (auto& inbox : inboxes) inbox->Close("test over");
    for (auto& [pair, link] : links) link->Release();
    senders.clear();
    links.clear();
  }

  // Stage i's options: a sender to each stage its routes name, a heartbeat of 50 ms.
  daemon::SyncExchangeOptions Options(int i) {
    daemon::SyncExchangeOptions so;
    so.site = SyncSite(i);
    so.job_id = "j-000001";
    so.attempt = kSyncAttempt;
    so.stage = i;
    so.grid = grid;
    so.routes = routes[static_cast<size_t>(i)];
    for (int d : daemon::SyncPeers(so.routes, i)) {
      so.to_stage[d] = senders.at({i, d}).get();
      so.stage_sites[d] = SyncSite(d);
    }
    so.live = live;
    so.ring = o.ring;
    so.codec = o.codec;
    so.model_slices = model::ParameterLayout(SyncConfig()).num_slices();
    so.inbox = inboxes[static_cast<size_t>(i)].get();
    so.heartbeat_seconds = 0.05;
    so.stop = &stop;
    so.file_env = o.file_env;
    return so;
  }

  static std::vector<float> Contribution(int replica, int position, int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t j = 0; j < v.size(); ++j) {
      v[j] = std::sin(0.37f * static_cast<float>(j) + 1.3f * replica + 0.7f * position) *
                 (1.0f + replica) +
             0.01f * static_cast<float>(j % 7);
    }
    return v;
  }

  int size() const { return grid.size(); }
  bool is_live(int stage) const { return live[static_cast<size_t>(grid.replica(stage))]; }
  FakeLink& link(int from, int to) { return *links.at({from, to}); }
  daemon::Inbox& inbox(int stage) { return *inboxes[static_cast<size_t>(stage)]; }

  SyncGroupOptions o;
  daemon::StageGrid grid;
  std::vector<bool> live;
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<daemon::Inbox>> inboxes;             // by stage
  std::vector<std::unique_ptr<daemon::LinkMonitor>> monitors;      // by stage
  std::map<std::pair<int, int>, std::unique_ptr<FakeLink>> links;  // by (from, to) stage
  std::map<std::pair<int, int>, std::unique_ptr<daemon::LinkSender>> senders;
  std::vector<std::vector<daemon::SyncRoute>> routes;    // by stage
  std::vector<std::vector<float>> values;                // by stage: its contribution
  std::vector<std::unique_ptr<daemon::SyncExchange>> x;  // by stage
};

// Every live stage's AllGather at once, each on a thread of its own.
struct Gathered {
  std::vector<Status> status;
  std::vector<std::vector<float>> out;
};
inline Gathered AllGatherAll(SyncGroup& g, uint64_t step, const std::vector<float>& weights,
                             int phase = fleet::kEveryPhase) {
  Gathered r;
  r.status.resize(static_cast<size_t>(g.size()));
  r.out.resize(static_cast<size_t>(g.size()));
  std::vector<std::thread> threads;
  for (int i = 0; i < g.size(); ++i) {
    if (!g.is_live(i)) continue;
    r.out[i].assign(g.values[i].size(), -1.0f);
    threads.emplace_back([&g, &r, &weights, step, phase, i] {
      r.status[i] = g.x[i]->AllGather(step, g.values[i], weights, r.out[i], phase);
    });
  }
  for (auto& t : threads) t.join();
  return r;
}

// What stage `stage` should get from a gathered sync with an exact codec: from zero,
// weights[r] x replica r's contribution at the same position, live replicas in order.
inline std::vector<float> GatherSum(const SyncGroup& g, int stage,
                                    const std::vector<float>& weights) {
  const int p = g.grid.position(stage);
  std::vector<float> sum(g.values[stage].size(), 0.0f);
  for (int r = 0; r < g.grid.replicas; ++r) {
    if (!g.live[static_cast<size_t>(r)]) continue;
    const std::vector<float>& v = g.values[static_cast<size_t>(g.grid.flat(r, p))];
    for (size_t j = 0; j < sum.size(); ++j) sum[j] += weights[r] * v[j];
  }
  return sum;
}

// The same around rings (fleet/sync_ring.h): each slice's live holders in replica order cut
// it into L chunks, chunk c summed from zero starting at member c, in ring order.
inline std::vector<float> RingSum(const SyncGroup& g, int stage,
                                  const std::vector<float>& weights) {
  const int p = g.grid.position(stage);
  std::vector<int> members;
  for (int r = 0; r < g.grid.replicas; ++r) {
    if (g.live[static_cast<size_t>(r)]) members.push_back(r);
  }
  const int L = static_cast<int>(members.size());
  std::vector<float> sum(g.values[stage].size(), 0.0f);
  for (const daemon::SyncRoute& route : g.routes[static_cast<size_t>(stage)]) {
    for (int c = 0; c < L; ++c) {
      const fleet::RingChunk chunk = fleet::RingChunkOf(route.slice.size, L, c);
      for (int64_t j = route.slice.offset + chunk.begin; j < route.slice.offset + chunk.end; ++j) {
        float s = 0.0f;
        for (int t = 0; t < L; ++t) {
          const int r = members[static_cast<size_t>((c + t) % L)];
          s += weights[r] * g.values[static_cast<size_t>(g.grid.flat(r, p))][j];
        }
        sum[static_cast<size_t>(j)] = s;
      }
    }
  }
  return sum;
}

}  // namespace longhaul::testing
