// ReplicaSync (daemon/job/sync/replica_sync.h) against fakes of its neighbours: 2 or 3
// pipeline replicas of a one-stage job (a tiny GPT-2 on cpu-ref), each with its own fragment,
// inbox, link monitor, fake clock and a LinkSender to every other replica's stage over a fake
// link that files what it carries in that stage's inbox. Sync mode step sums the replicas'
// gradients in replica order, bit for bit; local mode's outer step with lr 1 and no momentum
// is the token-weighted mean of the replicas' parameters; Save and Restore carry the anchor,
// the momentum and the residuals (a restored group continues bit for bit as the original);
// a dropped replica is neither sent to nor weighed. Faults: a send that may heal is retried,
// a refusal ends the sender's sync (at once, or at its next one when it came after the sync
// had what it needed), a stop ends a wait for a missing peer, and Create refuses what it
// cannot work with. The adaptive codec follows the link estimates, with the fake clock
// deciding its upgrade hysteresis.
#include "daemon/job/sync/replica_sync.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/job/exchange/inbox.h"
#include "daemon/job/exchange/sender.h"
#include "daemon/job/spec/job_spec.h"
#include "daemon/job/spec/stage_grid.h"
#include "daemon/job/state/sync_checkpoint.h"
#include "daemon/link_monitor.h"
#include "fleet/sync_options.h"
#include "fleet/sync_slices.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/replicated_fragment.h"
#include "test/daemon/fake_link.h"

namespace longhaul::daemon {
namespace {

constexpr uint32_t kAttempt = 1;
constexpr int kB = 2, kT = 4;
constexpr char kJob[] = "j-000042";

std::string Site(int r) { return "r" + std::to_string(r); }

// One layer, C 16, 2 heads, V 32 (Vp 128), maxT 8: a few thousand parameters in 16 slices.
model::ModelConfig Config() { return model::MakeConfig(1, 16, 2, 32, 8); }

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Values of magnitude about `scale` that differ per replica and per salt.
std::vector<float> Pattern(size_t n, int r, float scale, int salt = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = scale * std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(r) +
                            0.71f * static_cast<float>(salt));
  }
  return v;
}

fleet::SyncOptions StepSync(std::string codec = "exact") {
  fleet::SyncOptions s;
  s.mode = fleet::SyncMode::kStep;
  s.every = 1;
  s.codec = std::move(codec);
  return s;
}

// Local mode whose outer step is the plain (token-weighted) mean: lr 1, no momentum.
fleet::SyncOptions AveragingSync(int every = 1, std::string codec = "exact") {
  fleet::SyncOptions s;
  s.mode = fleet::SyncMode::kLocal;
  s.every = every;
  s.codec = std::move(codec);
  s.outer.lr = 1.0f;
  s.outer.momentum = 0.0f;
  s.outer.nesterov = false;
  return s;
}

struct GroupOptions {
  int replicas = 2;
  fleet::SyncOptions sync;
  std::vector<int> microbatches;  // empty: one each
  std::vector<uint32_t> dropped;
  uint64_t steps = 10;
};

// R replicas of a one-stage job: flat stage r is replica r's, at site "r<r>".
class Group {
 public:
  explicit Group(GroupOptions o) : o_(std::move(o)), config_(Config()) {
    const int R = o_.replicas;
    if (o_.microbatches.empty()) o_.microbatches.assign(static_cast<size_t>(R), 1);
    assignment_.set_job_id(kJob);
    assignment_.set_attempt(kAttempt);
    for (int r = 0; r < R; ++r) {
      v1::StageInfo* s = assignment_.add_stages();
      s->set_index(static_cast<uint32_t>(r));
      s->set_site(Site(r));
      s->set_layer_begin(0);
      s->set_layer_end(static_cast<uint32_t>(config_.num_layers));
      s->set_replica(static_cast<uint32_t>(r));
    }
    for (uint32_t d : o_.dropped) assignment_.add_dropped_replicas(d);
    grid_ = StageGrid::OfPlan(R, assignment_.stages());
    for (int r = 0; r < R; ++r) {
      traffic_.push_back(std::make_unique<LinkMonitor>(Site(r)));
      estimates_.push_back(std::make_unique<LinkMonitor>(Site(r)));
      inboxes_.push_back(std::make_unique<Inbox>(size_t{64} << 20));
      inboxes_.back()->StartAttempt(kAttempt, 0);
      stop_.push_back(std::make_unique<std::atomic<bool>>(false));
      auto ops = kernels::MakeOps("cpu-ref", 1);
      REQUIRE(ops.ok());
      ops_.push_back(std::move(*ops));
      model::FragmentOptions fo{
          .begin = 0, .end = config_.num_layers, .batch_size = kB, .seq_len = kT, .slots = 1};
      auto f = model::ReplicatedFragment::Create(config_, fo, {ops_.back().get()});
      REQUIRE(f.ok());
      fragments_.push_back(std::move(*f));
      fragments_.back()->InitParameters(7);  // every replica starts from the same parameters
    }
    for (int a = 0; a < R; ++a) {
      for (int b = 0; b < R; ++b) {
        if (a == b) continue;
        auto link = std::make_unique<testing::FakeLink>(Site(b));
        Inbox* to = inboxes_[static_cast<size_t>(b)].get();
        link->OnDeliver(testing::IntoInbox(to));
        LinkSenderOptions so;
        so.site = Site(a);
        so.peer = Site(b);
        senders_[{a, b}] = std::make_unique<LinkSender>(
            so, link.get(), traffic_[static_cast<size_t>(a)].get(), spdlog::default_logger());
        links_[{a, b}] = std::move(link);
      }
    }
    sync_.resize(static_cast<size_t>(R));
  }

  ~Group() {
    // Every receiver ends (Cancel) before the senders and inboxes it uses go.
    for (auto& s : sync_) s.reset();
    for (auto& [pair, sender] : senders_) sender->Close();
  }

  int replicas() const { return o_.replicas; }
  bool live(int r) const {
    for (uint32_t d : o_.dropped) {
      if (static_cast<int>(d) == r) return false;
    }
    return true;
  }
  std::vector<int> Live() const {
    std::vector<int> out;
    for (int r = 0; r < o_.replicas; ++r) {
      if (live(r)) out.push_back(r);
    }
    return out;
  }

  // What the stage runner passes replica r's stage (stage_runner_sync.cc).
  ReplicaSyncOptions Options(int r) {
    ReplicaSyncOptions o;
    o.site = Site(r);
    o.assignment = assignment_;
    o.assignment.set_stage(static_cast<uint32_t>(r));
    o.grid = grid_;
    o.sync = o_.sync;
    o.model = config_;
    o.steps = o_.steps;
    o.microbatches = o_.microbatches;
    o.fragment = fragments_[static_cast<size_t>(r)].get();
    for (int p = 0; p < o_.replicas; ++p) {
      if (p == r) continue;
      // A dropped replica's stage: no sender (it sits out the attempt).
      o.to_stage[p] = live(p) ? senders_.at({r, p}).get() : nullptr;
    }
    o.inbox = inboxes_[static_cast<size_t>(r)].get();
    o.monitor = estimates_[static_cast<size_t>(r)].get();
    o.log = spdlog::default_logger();
    o.heartbeat_seconds = 0.05;
    o.stop = stop_[static_cast<size_t>(r)].get();
    o.file_env = &clock_;
    return o;
  }
  StatusOr<std::unique_ptr<ReplicaSync>> Make(int r) { return ReplicaSync::Create(Options(r)); }
  // Creates every live replica's ReplicaSync.
  void CreateAll() {
    for (int r : Live()) {
      auto s = Make(r);
      INFO(s.status().ToString());
      REQUIRE(s.ok());
      sync_[static_cast<size_t>(r)] = std::move(*s);
    }
  }
  ReplicaSync& sync(int r) { return *sync_[static_cast<size_t>(r)]; }
  std::unique_ptr<ReplicaSync>& slot(int r) { return sync_[static_cast<size_t>(r)]; }

  // `fn` on every replica in `who` at once, each on its own thread (each waits for the
  // others' frames); the statuses by replica (OK for the others).
  std::vector<Status> RunEach(const std::vector<int>& who,
                              const std::function<Status(ReplicaSync&)>& fn) {
    std::vector<Status> status(static_cast<size_t>(o_.replicas));
    std::vector<std::thread> threads;
    for (int r : who) {
      threads.emplace_back([&, r] { status[static_cast<size_t>(r)] = fn(sync(r)); });
    }
    for (auto& t : threads) t.join();
    return status;
  }
  std::vector<Status> RunLive(const std::function<Status(ReplicaSync&)>& fn) {
    return RunEach(Live(), fn);
  }
  // Every inbox at `step` (a sync's frames more than Inbox::kStepsAhead ahead are refused).
  void AdvanceTo(uint64_t step) {
    for (auto& inbox : inboxes_) inbox->AdvanceTo(step);
  }

  size_t n() const { return static_cast<size_t>(fragments_[0]->layout().total()); }
  const model::FragmentLayout& layout() const { return fragments_[0]->layout(); }
  model::ReplicatedFragment& fragment(int r) { return *fragments_[static_cast<size_t>(r)]; }
  std::vector<float> Params(int r) {
    std::vector<float> v(n());
    fragment(r).GetParameters(v.data());
    return v;
  }
  std::vector<float> Grads(int r) {
    std::vector<float> v(n());
    fragment(r).GetGradients(v.data());
    return v;
  }
  testing::FakeLink& link(int a, int b) { return *links_.at({a, b}); }
  LinkSender& sender(int a, int b) { return *senders_.at({a, b}); }
  Inbox& inbox(int r) { return *inboxes_[static_cast<size_t>(r)]; }
  LinkMonitor& estimates(int r) { return *estimates_[static_cast<size_t>(r)]; }
  std::atomic<bool>& stop(int r) { return *stop_[static_cast<size_t>(r)]; }
  std::atomic<double>& now() { return clock_.now; }

 private:
  GroupOptions o_;
  model::ModelConfig config_;
  v1::StageAssignment assignment_;
  StageGrid grid_;
  testing::FakeClockEnv clock_;  // every replica's ReplicaSync and SyncExchange clock
  std::vector<std::unique_ptr<LinkMonitor>> traffic_;    // the senders' passive samples
  std::vector<std::unique_ptr<LinkMonitor>> estimates_;  // what ReplicaSync prices with
  std::vector<std::unique_ptr<Inbox>> inboxes_;
  std::vector<std::unique_ptr<std::atomic<bool>>> stop_;
  std::vector<std::unique_ptr<kernels::Ops>> ops_;
  std::vector<std::unique_ptr<model::ReplicatedFragment>> fragments_;
  std::map<std::pair<int, int>, std::unique_ptr<testing::FakeLink>> links_;
  std::map<std::pair<int, int>, std::unique_ptr<LinkSender>> senders_;
  std::vector<std::unique_ptr<ReplicaSync>> sync_;
};

// The sum in replica order of the live replicas' arrays, as the exchange adds it (from zero,
// 1 x each).
std::vector<float> OrderedSum(const std::vector<std::vector<float>>& by_replica,
                              const std::vector<int>& live) {
  std::vector<float> sum(by_replica[static_cast<size_t>(live[0])].size(), 0.0f);
  for (int r : live) {
    const std::vector<float>& v = by_replica[static_cast<size_t>(r)];
    for (size_t j = 0; j < sum.size(); ++j) sum[j] += 1.0f * v[j];
  }
  return sum;
}

// Each replica's gradients set to its own pattern; returns them by replica.
std::vector<std::vector<float>> SetDistinctGradients(Group& g, int salt = 0) {
  std::vector<std::vector<float>> grads(static_cast<size_t>(g.replicas()));
  for (int r = 0; r < g.replicas(); ++r) {
    grads[static_cast<size_t>(r)] = Pattern(g.n(), r, 0.5f + 0.25f * static_cast<float>(r), salt);
    g.fragment(r).SetGradients(grads[static_cast<size_t>(r)].data());
  }
  return grads;
}

TEST_CASE("replica sync, mode step: the gradients become the replicas' sum, bit for bit") {
  const int replicas = GENERATE(2, 3);
  INFO(replicas << " replicas");
  Group g({.replicas = replicas, .sync = StepSync()});
  g.CreateAll();
  CHECK(g.sync(0).union_microbatches() == replicas);
  CHECK_FALSE(g.sync(0).local());
  const std::vector<std::vector<float>> grads = SetDistinctGradients(g);
  const std::vector<Status> st =
      g.RunLive([](ReplicaSync& s) { return s.SyncGradients(/*step=*/0, 0.5); });
  const std::vector<float> expected = OrderedSum(grads, g.Live());
  const size_t slices = fleet::SyncSlices(g.layout()).size();
  for (int r = 0; r < replicas; ++r) {
    INFO("replica " << r);
    REQUIRE(st[static_cast<size_t>(r)].ok());
    CHECK(SameBits(g.Grads(r), expected));
    CHECK(SameBits(g.Grads(r), g.Grads(0)));
    // One fp32 frame per slice to every other replica's stage.
    const std::vector<OutboundUsage> usage = g.sync(r).Usage();
    REQUIRE(static_cast<int>(usage.size()) == replicas - 1);
    for (const OutboundUsage& u : usage) {
      CHECK(u.codec == "fp32");
      CHECK(u.tensors == slices);
      CHECK(u.raw_bytes == g.n() * sizeof(float));
    }
    CHECK(g.sync(r).Report().syncs() == 1);
    // Nothing of local mode's; the exact codec drops nothing (its residuals stay zero).
    SyncState state;
    g.sync(r).Save(&state);
    CHECK(state.anchor.empty());
    CHECK(state.momentum.empty());
    for (const std::vector<float>& residual : state.residuals) {
      for (float e : residual) REQUIRE(e == 0.0f);
    }
  }
  // Local mode's calls do nothing in mode step: no frame, no change to the parameters.
  const std::vector<float> before = g.Params(0);
  CHECK(g.sync(0).OuterStep(1, 0.5).ok());
  CHECK(g.sync(0).StartSync(1, 0.5, false).ok());
  CHECK(SameBits(g.Params(0), before));
  CHECK(g.sync(0).Report().syncs() == 1);
  CHECK(g.link(0, 1).attempts() == static_cast<int>(slices));
}

TEST_CASE("replica sync, local mode: lr 1 without momentum makes every replica the mean") {
  const int replicas = GENERATE(2, 3);
  INFO(replicas << " replicas");
  // 2 and 4 microbatches each: the weights are exact powers of two (1/2, or 1/4 1/4 1/2).
  std::vector<int> mb = replicas == 2 ? std::vector<int>{2, 2} : std::vector<int>{1, 1, 2};
  Group g({.replicas = replicas, .sync = AveragingSync(), .microbatches = mb});
  // A zero anchor: each pseudo-gradient is -params exactly, and the mean's only rounding is
  // the sum's, which the test repeats.
  const std::vector<float> zero(g.n(), 0.0f);
  std::vector<std::vector<float>> params(static_cast<size_t>(replicas));
  for (int r = 0; r < replicas; ++r) g.fragment(r).SetParameters(zero.data());
  g.CreateAll();
  for (int r = 0; r < replicas; ++r) {
    g.sync(r).Fresh();
    params[static_cast<size_t>(r)] = Pattern(g.n(), r, 1.0f + static_cast<float>(r));
    g.fragment(r).SetParameters(params[static_cast<size_t>(r)].data());
  }
  const std::vector<float> w = g.sync(0).token_weights();
  REQUIRE(w.size() == static_cast<size_t>(replicas));
  if (replicas == 2) {
    CHECK(w == std::vector<float>{0.5f, 0.5f});
  } else {
    CHECK(w == std::vector<float>{0.25f, 0.25f, 0.5f});
  }
  const std::vector<Status> st = g.RunLive([](ReplicaSync& s) { return s.OuterStep(0, 0.5); });
  std::vector<float> mean(g.n(), 0.0f);
  for (int r = 0; r < replicas; ++r) {
    for (size_t j = 0; j < g.n(); ++j) {
      mean[j] += w[static_cast<size_t>(r)] * params[static_cast<size_t>(r)][j];
    }
  }
  for (int r = 0; r < replicas; ++r) {
    INFO("replica " << r);
    REQUIRE(st[static_cast<size_t>(r)].ok());
    const std::vector<float> got = g.Params(r);
    CHECK(SameBits(got, g.Params(0)));
    size_t off = 0;
    for (size_t j = 0; j < g.n(); ++j) off += got[j] != mean[j];
    CHECK(off == 0);
    // The new anchor is where every replica continues from; plain averaging keeps no
    // momentum (the buffer stays 0: an outer step with momentum after a warm-up starts clean).
    SyncState state;
    g.sync(r).Save(&state);
    CHECK(state.anchor == got);
    REQUIRE(state.momentum.size() == g.n());
    size_t wrong = 0;
    for (size_t j = 0; j < g.n(); ++j) wrong += state.momentum[j] != 0.0f;
    CHECK(wrong == 0);
  }
}

TEST_CASE("replica sync, local mode: unequal microbatches weigh the mean by tokens") {
  Group g({.replicas = 2, .sync = AveragingSync(), .microbatches = {2, 1}});
  g.CreateAll();
  const std::vector<float> anchor = g.Params(0);  // InitParameters: the same on both
  for (int r = 0; r < 2; ++r) g.sync(r).Fresh();
  CHECK(g.sync(0).token_weights() == std::vector<float>{2.0f / 3.0f, 1.0f / 3.0f});
  CHECK(g.sync(1).token_weights() == g.sync(0).token_weights());
  std::vector<std::vector<float>> params;
  for (int r = 0; r < 2; ++r) {
    std::vector<float> p = anchor;
    const std::vector<float> step = Pattern(g.n(), r, 0.5f);
    for (size_t j = 0; j < p.size(); ++j) p[j] += step[j];
    g.fragment(r).SetParameters(p.data());
    params.push_back(std::move(p));
  }
  const std::vector<Status> st = g.RunLive([](ReplicaSync& s) { return s.OuterStep(0, 0.5); });
  REQUIRE(st[0].ok());
  REQUIRE(st[1].ok());
  const std::vector<float> got = g.Params(0);
  CHECK(SameBits(got, g.Params(1)));
  double worst = 0, from_plain = 0;
  for (size_t j = 0; j < g.n(); ++j) {
    const double weighted = (2.0 * params[0][j] + params[1][j]) / 3.0;
    const double plain = (static_cast<double>(params[0][j]) + params[1][j]) / 2.0;
    worst = std::max(worst, std::fabs(got[j] - weighted));
    from_plain = std::max(from_plain, std::fabs(got[j] - plain));
  }
  CHECK(worst <= 1e-5);       // float rounding
  CHECK(from_plain >= 0.05);  // and not the plain mean
}

TEST_CASE("replica sync, local mode: only a sync step syncs") {
  Group g({.replicas = 2, .sync = AveragingSync(/*every=*/2)});
  g.CreateAll();
  for (int r = 0; r < 2; ++r) {
    g.sync(r).Fresh();
    const std::vector<float> p = Pattern(g.n(), r, 1.0f);
    g.fragment(r).SetParameters(p.data());
  }
  const std::vector<float> p0 = g.Params(0);
  // After the first step (done 1 of every 2): nothing crosses, nothing changes.
  CHECK(g.sync(0).OuterStep(0, 0.5).ok());
  CHECK(SameBits(g.Params(0), p0));
  CHECK(g.link(0, 1).attempts() == 0);
  CHECK(g.sync(0).Report().syncs() == 0);
  // Sync mode step's call does nothing in local mode.
  const std::vector<float> grads = g.Grads(0);
  CHECK(g.sync(0).SyncGradients(0, 0.5).ok());
  CHECK(SameBits(g.Grads(0), grads));
  CHECK(g.link(0, 1).attempts() == 0);
  // After the second: the mean.
  const std::vector<Status> st = g.RunLive([](ReplicaSync& s) { return s.OuterStep(1, 0.5); });
  REQUIRE(st[0].ok());
  REQUIRE(st[1].ok());
  CHECK(SameBits(g.Params(0), g.Params(1)));
  CHECK_FALSE(SameBits(g.Params(0), p0));
  CHECK(g.sync(0).Report().syncs() == 1);
}

TEST_CASE("replica sync, local mode: a streaming sync keeps the steps trained behind it") {
  fleet::SyncOptions sync = AveragingSync(/*every=*/2);
  sync.overlap = 1;
  Group g({.replicas = 2, .sync = sync});
  const std::vector<float> zero(g.n(), 0.0f);
  for (int r = 0; r < 2; ++r) g.fragment(r).SetParameters(zero.data());
  g.CreateAll();
  std::vector<std::vector<float>> started, moved;
  for (int r = 0; r < 2; ++r) {
    g.sync(r).Fresh();
    started.push_back(Pattern(g.n(), r, 1.0f));
    g.fragment(r).SetParameters(started.back().data());
  }
  // After step 1 (done 2): the sync starts and runs behind step 2; nothing blocks.
  for (int r = 0; r < 2; ++r) {
    REQUIRE(g.sync(r).OuterStep(1, 0.5).ok());  // not blocking: overlap
    REQUIRE(g.sync(r).StartSync(1, 0.5, /*resumed=*/false).ok());
    CHECK(SameBits(g.Params(r), started[static_cast<size_t>(r)]));
  }
  // Step 2 moves each replica on its own.
  for (int r = 0; r < 2; ++r) {
    std::vector<float> p = started[static_cast<size_t>(r)];
    const std::vector<float> d = Pattern(g.n(), r, 0.125f, /*salt=*/3);
    for (size_t j = 0; j < p.size(); ++j) p[j] += d[j];
    g.fragment(r).SetParameters(p.data());
    moved.push_back(std::move(p));
  }
  // After step 2 (done 3): the sync finishes; each replica is the new anchor (the mean at the
  // start) plus what step 2 moved it.
  for (int r = 0; r < 2; ++r) REQUIRE(g.sync(r).OuterStep(2, 0.5).ok());
  double worst = 0;
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> got = g.Params(r);
    for (size_t j = 0; j < g.n(); ++j) {
      const double mean = 0.5 * started[0][j] + 0.5 * started[1][j];
      const double want = mean + (static_cast<double>(moved[static_cast<size_t>(r)][j]) -
                                  started[static_cast<size_t>(r)][j]);
      worst = std::max(worst, std::fabs(got[j] - want));
    }
  }
  CHECK(worst <= 1e-5);
  CHECK_FALSE(SameBits(g.Params(0), g.Params(1)));  // step 2's moves stay their own
  SyncState s0, s1;
  g.sync(0).Save(&s0);
  g.sync(1).Save(&s1);
  CHECK(s0.anchor == s1.anchor);  // the same new anchor on both
  CHECK(g.sync(0).Report().syncs() == 1);
}

TEST_CASE("replica sync: Save and Restore carry anchor, momentum and residuals") {
  fleet::SyncOptions sync = AveragingSync(1, "q4");
  sync.outer = fleet::OuterOptions{};  // DiLoCo's: lr 0.7, Nesterov momentum 0.9
  Group a({.replicas = 2, .sync = sync});
  a.CreateAll();
  for (int r = 0; r < 2; ++r) {
    a.sync(r).Fresh();
    std::vector<float> p = a.Params(r);
    const std::vector<float> d = Pattern(a.n(), r, 0.3f);
    for (size_t j = 0; j < p.size(); ++j) p[j] += d[j];
    a.fragment(r).SetParameters(p.data());
  }
  std::vector<Status> st = a.RunLive([](ReplicaSync& s) { return s.OuterStep(0, 0.5); });
  REQUIRE(st[0].ok());
  REQUIRE(st[1].ok());
  std::vector<SyncState> saved(2);
  for (int r = 0; r < 2; ++r) {
    INFO("replica " << r);
    a.sync(r).Save(&saved[static_cast<size_t>(r)]);
    const SyncState& s = saved[static_cast<size_t>(r)];
    CHECK(s.anchor == a.Params(r));
    REQUIRE(s.momentum.size() == a.n());
    bool momentum = false, residual = false;
    for (float m : s.momentum) momentum = momentum || m != 0.0f;
    CHECK(momentum);
    // q4 drops something of every slice: one residual per slice, of the slice's size.
    REQUIRE(s.residuals.size() == a.sync(r).ResidualSizes().size());
    for (size_t k = 0; k < s.residuals.size(); ++k) {
      CHECK(static_cast<int64_t>(s.residuals[k].size()) == a.sync(r).ResidualSizes()[k]);
      for (float e : s.residuals[k]) residual = residual || e != 0.0f;
    }
    CHECK(residual);
  }

  SECTION("restored into a fresh ReplicaSync, saved again: the same state") {
    auto fresh = a.Make(0);
    REQUIRE(fresh.ok());
    REQUIRE((*fresh)->Restore(saved[0], 1).ok());
    SyncState again;
    (*fresh)->Save(&again);
    CHECK(again.anchor == saved[0].anchor);
    CHECK(again.momentum == saved[0].momentum);
    CHECK(again.residuals == saved[0].residuals);
  }

  SECTION("a group restored from it continues bit for bit as the original") {
    Group b({.replicas = 2, .sync = sync});
    b.CreateAll();
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> p = a.Params(r);
      b.fragment(r).SetParameters(p.data());
      REQUIRE(b.sync(r).Restore(saved[static_cast<size_t>(r)], 1).ok());
    }
    // The same inner steps on both groups, then the next outer step.
    for (Group* g : {&a, &b}) {
      for (int r = 0; r < 2; ++r) {
        std::vector<float> p = g->Params(r);
        const std::vector<float> d = Pattern(g->n(), r, 0.2f, /*salt=*/5);
        for (size_t j = 0; j < p.size(); ++j) p[j] += d[j];
        g->fragment(r).SetParameters(p.data());
      }
      g->AdvanceTo(1);
      st = g->RunLive([](ReplicaSync& s) { return s.OuterStep(1, 0.5); });
      REQUIRE(st[0].ok());
      REQUIRE(st[1].ok());
    }
    for (int r = 0; r < 2; ++r) {
      INFO("replica " << r);
      CHECK(SameBits(b.Params(r), a.Params(r)));
      SyncState sa, sb;
      a.sync(r).Save(&sa);
      b.sync(r).Save(&sb);
      CHECK(SameBits(sb.anchor, sa.anchor));
      CHECK(SameBits(sb.momentum, sa.momentum));
      CHECK(sb.residuals == sa.residuals);
    }
    // A group that started afresh instead (the residuals and momentum lost) does not.
    Group c({.replicas = 2, .sync = sync});
    c.CreateAll();
    for (int r = 0; r < 2; ++r) {
      std::vector<float> p = saved[static_cast<size_t>(r)].anchor;
      c.fragment(r).SetParameters(p.data());
      c.sync(r).Fresh();
      const std::vector<float> d = Pattern(c.n(), r, 0.2f, /*salt=*/5);
      for (size_t j = 0; j < p.size(); ++j) p[j] += d[j];
      c.fragment(r).SetParameters(p.data());
    }
    c.AdvanceTo(1);
    st = c.RunLive([](ReplicaSync& s) { return s.OuterStep(1, 0.5); });
    REQUIRE(st[0].ok());
    CHECK_FALSE(SameBits(c.Params(0), a.Params(0)));
  }

  SECTION("local mode without an anchor is data loss, naming the step") {
    auto fresh = a.Make(0);
    REQUIRE(fresh.ok());
    SyncState empty;
    empty.residuals = saved[0].residuals;
    const Status s = (*fresh)->Restore(empty, 7);
    CHECK(s.code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(s.message()), Catch::Contains("step 7"));
    CHECK_THAT(std::string(s.message()), Catch::Contains(kJob));
  }

  SECTION("an anchor or momentum of another size is data loss, never stepped on") {
    auto fresh = a.Make(0);
    REQUIRE(fresh.ok());
    SyncState shorter = saved[0];
    shorter.anchor.resize(3);
    shorter.momentum.resize(3);
    const Status s = (*fresh)->Restore(shorter, 1);
    CHECK(s.code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(s.message()), Catch::Contains("anchor of 3"));
    CHECK((*fresh)->RestoreOuter(std::vector<float>(3), std::vector<float>(3)).code() ==
          absl::StatusCode::kDataLoss);
  }

  SECTION("residuals of another slice count are data loss") {
    auto fresh = a.Make(0);
    REQUIRE(fresh.ok());
    SyncState wrong = saved[0];
    wrong.residuals.pop_back();
    CHECK((*fresh)->Restore(wrong, 1).code() == absl::StatusCode::kDataLoss);
  }
}

TEST_CASE("replica sync, mode step: Restore needs no anchor") {
  Group g({.replicas = 2, .sync = StepSync("q8")});
  g.CreateAll();
  CHECK(g.sync(0).Restore(SyncState{}, 3).ok());
  SyncState s;
  g.sync(0).Save(&s);
  CHECK(s.anchor.empty());
  CHECK(s.momentum.empty());
  CHECK(s.residuals.empty());  // none carried before a lossy sync
}

TEST_CASE("replica sync: a dropped replica is neither sent to nor weighed") {
  SECTION("mode step: its microbatches go to the live ones; the live two sum") {
    const std::vector<int> mb = RedistributeMicrobatches({2, 2, 2}, {false, true, false});
    REQUIRE(mb == std::vector<int>{3, 0, 3});
    Group g({.replicas = 3, .sync = StepSync(), .microbatches = mb, .dropped = {1}});
    g.CreateAll();  // replicas 0 and 2
    for (int r : {0, 2}) {
      CHECK(g.sync(r).union_microbatches() == 6);
      CHECK(g.sync(r).token_weights() == std::vector<float>{0.5f, 0.0f, 0.5f});
    }
    const std::vector<std::vector<float>> grads = SetDistinctGradients(g);
    const std::vector<Status> st =
        g.RunLive([](ReplicaSync& s) { return s.SyncGradients(0, 0.5); });
    const std::vector<float> expected = OrderedSum(grads, {0, 2});
    for (int r : {0, 2}) {
      INFO("replica " << r);
      REQUIRE(st[static_cast<size_t>(r)].ok());
      CHECK(SameBits(g.Grads(r), expected));
      const std::vector<OutboundUsage> usage = g.sync(r).Usage();
      REQUIRE(usage.size() == 1);
      CHECK(usage[0].to_site == Site(2 - r));
      CHECK(g.link(r, 1).attempts() == 0);
    }
    CHECK(SameBits(g.Grads(1), grads[1]));  // the dropped replica's own, untouched
  }

  SECTION("local mode: the mean of the live two") {
    Group g({.replicas = 3, .sync = AveragingSync(), .microbatches = {2, 2, 2}, .dropped = {1}});
    const std::vector<float> zero(g.n(), 0.0f);
    for (int r = 0; r < 3; ++r) g.fragment(r).SetParameters(zero.data());
    g.CreateAll();
    std::vector<std::vector<float>> params(3);
    for (int r = 0; r < 3; ++r) {
      if (g.live(r)) g.sync(r).Fresh();  // the zero anchor
      params[static_cast<size_t>(r)] = Pattern(g.n(), r, 1.0f + static_cast<float>(r));
      g.fragment(r).SetParameters(params[static_cast<size_t>(r)].data());
    }
    CHECK(g.sync(0).token_weights() == std::vector<float>{0.5f, 0.0f, 0.5f});
    const std::vector<Status> st = g.RunLive([](ReplicaSync& s) { return s.OuterStep(0, 0.5); });
    REQUIRE(st[0].ok());
    REQUIRE(st[2].ok());
    std::vector<float> mean(g.n());
    for (size_t j = 0; j < g.n(); ++j) mean[j] = 0.5f * params[0][j] + 0.5f * params[2][j];
    for (int r : {0, 2}) {
      const std::vector<float> got = g.Params(r);
      size_t off = 0;
      for (size_t j = 0; j < g.n(); ++j) off += got[j] != mean[j];
      CHECK(off == 0);
    }
    CHECK(g.link(0, 1).attempts() == 0);
    CHECK(g.link(2, 1).attempts() == 0);
  }
}

TEST_CASE("replica sync: a send that may heal is retried and the sync completes") {
  Group g({.replicas = 2, .sync = StepSync()});
  g.CreateAll();
  g.link(0, 1).Script({absl::UnavailableError("r1 restarting"), absl::UnavailableError("again")});
  const std::vector<std::vector<float>> grads = SetDistinctGradients(g);
  const std::vector<Status> st = g.RunLive([](ReplicaSync& s) { return s.SyncGradients(0, 0.5); });
  REQUIRE(st[0].ok());
  REQUIRE(st[1].ok());
  const std::vector<float> expected = OrderedSum(grads, g.Live());
  CHECK(SameBits(g.Grads(0), expected));
  CHECK(SameBits(g.Grads(1), expected));
  const int slices = static_cast<int>(fleet::SyncSlices(g.layout()).size());
  CHECK(g.link(0, 1).attempts() == slices + 2);
  CHECK(static_cast<int>(g.link(0, 1).delivered().size()) == slices);
}

TEST_CASE("replica sync: a refused frame ends each refused sender's sync, naming the peer") {
  const bool local = GENERATE(false, true);
  INFO((local ? "local mode" : "mode step"));
  Group g({.replicas = 2, .sync = local ? AveragingSync() : StepSync()});
  g.CreateAll();
  for (int r = 0; r < 2; ++r) g.sync(r).Fresh();
  SetDistinctGradients(g);
  // Each side refuses the other's first frame: neither gets all of the other's frames, so
  // each waits until its own sender's refusal ends the wait.
  g.link(0, 1).Script({absl::InvalidArgumentError("r1 does not expect it")});
  g.link(1, 0).Script({absl::InvalidArgumentError("r0 does not expect it")});
  const std::vector<Status> st = g.RunLive(
      [local](ReplicaSync& s) { return local ? s.OuterStep(0, 0.5) : s.SyncGradients(0, 0.5); });
  for (int r = 0; r < 2; ++r) {
    INFO("replica " << r << ": " << st[static_cast<size_t>(r)].ToString());
    REQUIRE_FALSE(st[static_cast<size_t>(r)].ok());
    CHECK(st[static_cast<size_t>(r)].code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(st[static_cast<size_t>(r)].message()),
               Catch::Contains("to site '" + Site(1 - r) + "' failed"));
    CHECK_THAT(std::string(st[static_cast<size_t>(r)].message()),
               Catch::Contains(Site(1 - r) + " does not expect it"));
  }
}

TEST_CASE("replica sync: a refusal after the sync had its frames fails the sender's next sync") {
  Group g({.replicas = 2, .sync = StepSync()});
  g.CreateAll();
  SetDistinctGradients(g);
  // Replica 0's frames wait in the link; the first will be refused.
  g.link(0, 1).Hold();
  g.link(0, 1).Script({absl::InvalidArgumentError("r1 does not expect it")});
  Status peer;
  std::thread t([&] { peer = g.sync(1).SyncGradients(0, 0.5); });
  // Replica 1's frames cross: replica 0's sync has all it waits for, its own frames queued.
  REQUIRE(g.sync(0).SyncGradients(0, 0.5).ok());
  g.link(0, 1).Release();
  const Status refused = g.sender(0, 1).Flush();
  REQUIRE(refused.code() == absl::StatusCode::kInvalidArgument);
  // Replica 1 never gets the refused frame: it waits until stopped.
  g.stop(1) = true;
  t.join();
  CHECK(peer.code() == absl::StatusCode::kAborted);
  // The refusal stays with replica 0's sender: its next sync fails with it.
  g.AdvanceTo(1);
  const Status next = g.sync(0).SyncGradients(1, 0.5);
  CHECK(next == refused);
  CHECK_THAT(std::string(next.message()), Catch::Contains("to site 'r1' failed"));
}

TEST_CASE("replica sync: a stop ends the wait for a peer that never sends") {
  const bool local = GENERATE(false, true);
  INFO((local ? "local mode" : "mode step"));
  Group g({.replicas = 2, .sync = local ? AveragingSync() : StepSync()});
  g.CreateAll();
  g.sync(0).Fresh();
  Status st;
  std::thread t(
      [&] { st = local ? g.sync(0).OuterStep(0, 0.5) : g.sync(0).SyncGradients(0, 0.5); });
  // Replica 1 never syncs. Stop once replica 0's receiver waits in its inbox (a stop set
  // before that ends the sync the same way, one heartbeat later).
  while (g.inbox(0).waiters() == 0) std::this_thread::yield();
  g.stop(0) = true;
  t.join();
  CHECK(st.code() == absl::StatusCode::kAborted);
}

TEST_CASE("replica sync: Create refuses what it cannot work with") {
  Group g({.replicas = 2, .sync = StepSync()});
  auto refused = [&](ReplicaSyncOptions o) { return ReplicaSync::Create(std::move(o)).status(); };

  SECTION("one replica") {
    ReplicaSyncOptions o = g.Options(0);
    v1::StageAssignment a = o.assignment;
    a.mutable_stages()->DeleteSubrange(1, 1);
    o.grid = StageGrid::OfPlan(1, a.stages());
    REQUIRE(o.grid.replicas == 1);
    o.assignment = a;
    o.microbatches = {1};
    o.to_stage.clear();
    const Status s = refused(std::move(o));
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("2 or more replicas (1)"));
  }
  SECTION("no fragment, inbox, monitor or file env; microbatches not one per replica") {
    ReplicaSyncOptions o = g.Options(0);
    o.fragment = nullptr;
    CHECK(refused(o).code() == absl::StatusCode::kInvalidArgument);
    o = g.Options(0);
    o.inbox = nullptr;
    CHECK(refused(o).code() == absl::StatusCode::kInvalidArgument);
    o = g.Options(0);
    o.monitor = nullptr;
    CHECK(refused(o).code() == absl::StatusCode::kInvalidArgument);
    o = g.Options(0);
    o.file_env = nullptr;
    CHECK(refused(o).code() == absl::StatusCode::kInvalidArgument);
    o = g.Options(0);
    o.microbatches = {1};
    CHECK(refused(o).code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("a stage or a sender outside the plan") {
    ReplicaSyncOptions o = g.Options(0);
    o.assignment.set_stage(2);
    CHECK(refused(o).code() == absl::StatusCode::kInvalidArgument);
    o = g.Options(0);
    o.to_stage[5] = o.to_stage.at(1);
    const Status s = refused(o);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("stage 5 outside the plan"));
  }
  SECTION("no sender to a live peer") {
    ReplicaSyncOptions o = g.Options(0);
    o.to_stage[1] = nullptr;
    const Status s = refused(o);
    CHECK(s.code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(s.message()), Catch::Contains("no sender to stage 1"));
  }
  SECTION("a codec that does not parse") {
    ReplicaSyncOptions o = g.Options(0);
    o.sync.codec = "q9";
    const Status s = refused(o);
    CHECK_FALSE(s.ok());
    CHECK_THAT(std::string(s.message()), Catch::Contains("q9"));
  }
  SECTION("the options it is given, it takes") { CHECK(g.Make(0).ok()); }
}

// The adaptive codec's link estimate of the peer: `bytes_per_second`, replacing whatever was
// there (a probe that was asked for).
void SetEstimate(Group& g, int r, double bytes_per_second) {
  const std::string peer = Site(1 - r);
  g.estimates(r).AddPeer(peer, peer + ":1");
  g.estimates(r).AddProbeSample(peer, static_cast<uint64_t>(bytes_per_second), 1.0, true);
  REQUIRE(g.estimates(r).Outbound(peer).bandwidth_bytes_per_second() > 0);
}

TEST_CASE("replica sync, adaptive codec: a fast link moves off the start codec, wte stays") {
  Group g({.replicas = 2, .sync = StepSync("adaptive")});
  g.CreateAll();
  for (int r = 0; r < 2; ++r) {
    CHECK(g.sync(r).Report().codec() == kAdaptiveSyncStart);
    SetEstimate(g, r, 1e12);
  }
  const std::vector<std::vector<float>> grads = SetDistinctGradients(g);
  const std::vector<Status> st = g.RunLive([](ReplicaSync& s) { return s.SyncGradients(0, 1.0); });
  REQUIRE(st[0].ok());
  REQUIRE(st[1].ok());
  const std::vector<float> exact = OrderedSum(grads, g.Live());
  const int wte = g.layout().model().SliceIndex(model::Tensor::kWte, 0);
  for (int r = 0; r < 2; ++r) {
    INFO("replica " << r);
    CHECK(g.sync(r).Report().codec() == "fp32");
    const std::vector<OutboundUsage> usage = g.sync(r).Usage();
    REQUIRE(usage.size() == 1);
    CHECK(usage[0].codec == "fp32");
    CHECK_THAT(usage[0].reason, Catch::Contains("adaptive"));
    const std::vector<float> got = g.Grads(r);
    CHECK(SameBits(got, g.Grads(0)));
    // Every slice crossed exactly but the tied embedding, pinned at the start codec.
    bool wte_lossy = false;
    for (const fleet::SyncSlice& slice : fleet::SyncSlices(g.layout())) {
      const auto at = static_cast<size_t>(slice.offset), size = static_cast<size_t>(slice.size);
      const std::vector<float> a(got.begin() + at, got.begin() + at + size);
      const std::vector<float> b(exact.begin() + at, exact.begin() + at + size);
      if (slice.index == wte) {
        wte_lossy = !SameBits(a, b);
      } else {
        INFO("slice " << slice.index);
        CHECK(SameBits(a, b));
      }
    }
    CHECK(wte_lossy);
  }
}

TEST_CASE("replica sync, adaptive codec: follows the estimate, upgrades after the window") {
  Group g({.replicas = 2, .sync = StepSync("adaptive")});
  g.CreateAll();
  uint64_t step = 0;
  std::vector<uint64_t> wire;  // replica 0's wire bytes of each sync
  auto sync = [&](double bytes_per_second) {
    if (bytes_per_second > 0) {
      for (int r = 0; r < 2; ++r) SetEstimate(g, r, bytes_per_second);
    }
    SetDistinctGradients(g, static_cast<int>(step));
    g.AdvanceTo(step);
    const uint64_t before = g.sync(0).Report().wire_bytes();
    const std::vector<Status> st =
        g.RunLive([&](ReplicaSync& s) { return s.SyncGradients(step, 1.0); });
    REQUIRE(st[0].ok());
    REQUIRE(st[1].ok());
    CHECK(SameBits(g.Grads(0), g.Grads(1)));
    CHECK(g.sync(1).Report().codec() == g.sync(0).Report().codec());
    wire.push_back(g.sync(0).Report().wire_bytes() - before);
    ++step;
    return g.sync(0).Report().codec();
  };
  // No estimate yet: the start codec, provisionally.
  CHECK(sync(0) == "q4");
  // The first estimate decides at once: the least lossy codec that fits.
  CHECK(sync(1e12) == "fp32");
  // The link falls to a byte a second: down at once.
  CHECK(sync(1) == "q4");
  // Fast again: an upgrade waits for a window of evidence on the (fake) clock...
  CHECK(sync(1e12) == "q4");
  g.now() = g.now() + 5;
  CHECK(sync(1e12) == "q4");
  // ... and takes it once the window has passed.
  g.now() = g.now() + 6;
  CHECK(sync(1e12) == "fp32");
  REQUIRE(wire.size() == 6);
  CHECK(wire[1] > 2 * wire[0]);  // fp32 frames against q4's
  CHECK(wire[1] > 2 * wire[2]);
  CHECK(wire[5] == wire[1]);
}

}  // namespace
}  // namespace longhaul::daemon
