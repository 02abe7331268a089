// SyncExchange (daemon/job/sync/sync_exchange.h) between pipeline replicas in one process
// (sync_group.h): 2 and 3 replicas of one stage and 2 replicas of two, each stage with its own
// inbox and a LinkSender to every stage of the other replicas over a fake link that files what
// it carries in that stage's inbox. Gathered with the exact codec every member gets the
// weighted sum in replica order, bit for bit as the test adds it; around a ring the sum in
// each chunk's ring order; a lossy codec's sum is that of the frames that crossed, and its
// residuals what they dropped; a streaming sync gives AllGather's bits; a dropped replica is
// neither sent to nor waited for. Faults: a send that may heal is retried (the sync
// completes, or waits until stopped while the link stays down), a refused frame ends the wait
// with the refusal naming the peer's site, a stop ends it, and a frame that is not its
// slice's is refused. Its exposed and hidden seconds are its file env's clock's (a fake one
// in the test, which the test alone moves).
#include "daemon/job/sync/sync_exchange.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "compression/codec.h"
#include "compression/frame.h"
#include "daemon/job/sync/sync_routes.h"
#include "fleet/gossip_node.h"
#include "fleet/sync_reduce.h"
#include "fleet/sync_ring.h"
#include "test/daemon/sync_group.h"
#include "test/daemon/test_util.h"

namespace longhaul::daemon {
namespace {

using testing::AllGatherAll;
using testing::Gathered;
using testing::GatherSum;
using testing::RingSum;
using testing::SameBits;
using testing::SyncConfig;
using testing::SyncGroup;
using testing::SyncSite;

constexpr uint32_t kAttempt = testing::kSyncAttempt;

std::vector<float> Weights(int replicas) {
  if (replicas == 2) return {0.25f, 0.75f};
  return {0.2f, 0.3f, 0.5f};
}

struct Shape {
  int replicas, stages;
};

// A frame of `values` with `shape`, as a peer would send it.
std::vector<uint8_t> Fp32Frame(const std::vector<float>& values, std::vector<int64_t> shape) {
  auto fp32 = compression::MakeCodec("fp32");
  REQUIRE(fp32.ok());
  std::vector<uint8_t> frame;
  REQUIRE(compression::EncodeFrame(**fp32, values, shape, {}, &frame).ok());
  return frame;
}

void Inject(Inbox& inbox, uint64_t step, uint32_t microbatch, int slice, const std::string& from,
            std::vector<uint8_t> frame) {
  ReceivedTensor t;
  t.from_site = from;
  t.payload = std::move(frame);
  const TensorKey key{kAttempt, step, microbatch, v1::TENSOR_KIND_SYNC,
                      static_cast<uint32_t>(slice)};
  REQUIRE(inbox.Put(key, std::move(t)).ok());
}

TEST_CASE("sync exchange: gathered exactly, every member gets the weighted sum, bit for bit") {
  const Shape shape = GENERATE(Shape{2, 1}, Shape{3, 1}, Shape{2, 2});
  INFO(shape.replicas << " replicas of " << shape.stages << " stages");
  SyncGroup g({.replicas = shape.replicas, .stages = shape.stages});
  const std::vector<float> weights = Weights(shape.replicas);
  const Gathered r = AllGatherAll(g, 0, weights);
  for (int i = 0; i < g.size(); ++i) {
    INFO("stage " << i);
    REQUIRE(r.status[i].ok());
    CHECK(SameBits(r.out[i], GatherSum(g, i, weights)));
    // The same position of every replica holds the same bits.
    const int first = g.grid.flat(0, g.grid.position(i));
    CHECK(SameBits(r.out[i], r.out[first]));
    // Each slice went once to each other replica's stage at the same position, exactly.
    const std::vector<OutboundUsage> usage = g.x[i]->Usage();
    REQUIRE(static_cast<int>(usage.size()) == shape.replicas - 1);
    for (const OutboundUsage& u : usage) {
      CHECK(u.codec == "fp32");
      CHECK(u.tensors == g.routes[i].size());
      CHECK(u.raw_bytes == g.values[i].size() * sizeof(float));
      CHECK(u.wire_bytes > u.raw_bytes);  // the frames' headers on top
    }
    for (int d : g.x[i]->SendsTo()) {
      CHECK(g.grid.position(d) == g.grid.position(i));
      CHECK(g.grid.replica(d) != g.grid.replica(i));
      CHECK(g.link(i, d).delivered().size() == g.routes[i].size());
    }
    CHECK(g.x[i]->SentShare() == 1.0);
    CHECK(g.x[i]->Report().syncs() == 1);
    // The exact codec drops nothing.
    for (const std::vector<float>& residual : g.x[i]->residuals()) {
      for (float e : residual) REQUIRE(e == 0.0f);
    }
  }
}

TEST_CASE("sync exchange: around a ring, every member gets the same sum, as each chunk adds") {
  const Shape shape = GENERATE(Shape{2, 1}, Shape{3, 1}, Shape{2, 2});
  INFO(shape.replicas << " replicas of " << shape.stages << " stages");
  SyncGroup g({.replicas = shape.replicas, .stages = shape.stages, .ring = true});
  REQUIRE(RingsAgree(g.grid, SyncConfig()));
  const std::vector<float> weights = Weights(shape.replicas);
  const Gathered r = AllGatherAll(g, 0, weights);
  const double share = 2.0 * (shape.replicas - 1) / shape.replicas;
  for (int i = 0; i < g.size(); ++i) {
    INFO("stage " << i);
    REQUIRE(r.status[i].ok());
    const std::vector<float> ring = RingSum(g, i, weights);
    CHECK(SameBits(r.out[i], ring));
    CHECK(SameBits(r.out[i], r.out[g.grid.flat(0, g.grid.position(i))]));
    // The gathered sum, but for the order each chunk was added in.
    const std::vector<float> gathered = GatherSum(g, i, weights);
    for (size_t j = 0; j < gathered.size(); ++j) {
      REQUIRE(std::fabs(r.out[i][j] - gathered[j]) <= 1e-6f * (1.0f + std::fabs(gathered[j])));
    }
    // Only to the next member of the ring, 2 (L - 1) / L of the fragment.
    const int next = g.grid.flat((g.grid.replica(i) + 1) % shape.replicas, g.grid.position(i));
    CHECK(g.x[i]->SendsTo() == std::vector<int>{next});
    CHECK(g.x[i]->SentShare() == Approx(share));
    const std::vector<OutboundUsage> usage = g.x[i]->Usage();
    REQUIRE(usage.size() == 1);
    CHECK(usage[0].to_site == SyncSite(next));
    CHECK(usage[0].tensors == g.routes[i].size() * 2 * (shape.replicas - 1));
  }
}

TEST_CASE("sync exchange: a lossy codec sums the frames that crossed and keeps what they dropped") {
  const std::string codec = GENERATE(std::string("q8"), std::string("topk:0.1+q8"));
  const bool ring = GENERATE(false, true);
  INFO(codec << (ring ? " around a ring" : " gathered"));
  SyncGroup g({.replicas = 3, .ring = ring, .codec = codec});
  const std::vector<float> weights = Weights(3);
  const Gathered r = AllGatherAll(g, 0, weights);
  std::vector<std::vector<std::vector<float>>> saved;  // by stage, slice
  for (int i = 0; i < g.size(); ++i) {
    INFO("stage " << i);
    REQUIRE(r.status[i].ok());
    CHECK(SameBits(r.out[i], r.out[0]));  // every member the same bits
    CHECK(g.x[i]->Usage()[0].wire_bytes < g.x[i]->Usage()[0].raw_bytes);
    const std::vector<std::vector<float>> residuals = g.x[i]->residuals();
    REQUIRE(residuals.size() == g.routes[i].size());
    size_t nonzero = 0;
    for (size_t k = 0; k < residuals.size(); ++k) {
      REQUIRE(static_cast<int64_t>(residuals[k].size()) == g.routes[i][k].slice.size);
      for (float e : residuals[k]) nonzero += e != 0.0f;
    }
    CHECK(nonzero > 0);
    saved.push_back(residuals);
  }
  if (!ring) {
    // Each slice's sum is fleet::SumContributions of the members' frames as they crossed, and
    // each member's residual what its frame dropped of its contribution.
    for (size_t k = 0; k < g.routes[0].size(); ++k) {
      const fleet::SyncSlice& slice = g.routes[0][k].slice;
      INFO("slice " << slice.index);
      std::vector<std::vector<uint8_t>> frames;
      for (int m = 0; m < 3; ++m) {
        const int to = (m + 1) % 3;
        for (const transport::WireTensor& t : g.link(m, to).delivered()) {
          if (t.header.tensor_id() == static_cast<uint32_t>(slice.index))
            frames.push_back(t.payload);
        }
        REQUIRE(static_cast<int>(frames.size()) == m + 1);
        auto decoded = compression::DecodeFrame(frames.back());
        REQUIRE(decoded.ok());
        for (int64_t j = 0; j < slice.size; ++j) {
          const float v = g.values[m][static_cast<size_t>(slice.offset + j)];
          REQUIRE(saved[m][k][j] == v - decoded->values[j]);
        }
      }
      std::vector<float> sum(static_cast<size_t>(slice.size));
      REQUIRE(fleet::SumContributions({frames[0], frames[1], frames[2]}, weights, sum).ok());
      CHECK(SameBits(sum, std::span<const float>(r.out[0]).subspan(slice.offset, slice.size)));
    }
  }
  // The residuals go into a checkpoint and come back: a group restored from them syncs the
  // next step to the same bits as the group that kept them.
  SyncGroup restored({.replicas = 3, .ring = ring, .codec = codec});
  for (int i = 0; i < g.size(); ++i) {
    REQUIRE(restored.x[i]->RestoreResiduals(saved[i]).ok());
    CHECK(restored.x[i]->residuals() == saved[i]);
  }
  const Gathered kept = AllGatherAll(g, 1, weights);
  const Gathered again = AllGatherAll(restored, 1, weights);
  for (int i = 0; i < g.size(); ++i) {
    REQUIRE(kept.status[i].ok());
    REQUIRE(again.status[i].ok());
    CHECK(SameBits(kept.out[i], again.out[i]));
  }
  // Residuals of another fragment are refused; none at all is a fresh start.
  auto fewer = saved[0];
  fewer.pop_back();
  CHECK(restored.x[0]->RestoreResiduals(fewer).code() == absl::StatusCode::kDataLoss);
  auto shorter = saved[0];
  shorter[0].pop_back();
  CHECK(restored.x[0]->RestoreResiduals(shorter).code() == absl::StatusCode::kDataLoss);
  CHECK(restored.x[0]->RestoreResiduals({}).ok());
}

TEST_CASE("sync exchange: a codec swapped between syncs carries the residuals into the next") {
  SyncGroup g({.replicas = 2, .codec = "q8"});
  const std::vector<float> weights = Weights(2);
  for (const Status& s : AllGatherAll(g, 0, weights).status) REQUIRE(s.ok());
  std::vector<std::vector<std::vector<float>>> residuals;
  for (int i = 0; i < 2; ++i) {
    residuals.push_back(g.x[i]->residuals());
    REQUIRE(g.x[i]->SetCodec("exact", "a faster link").ok());
    CHECK(g.x[i]->codec() == "exact");
    CHECK(g.x[i]->residuals() == residuals[i]);
    CHECK(g.x[i]->Usage()[0].reason == "a faster link");
  }
  // Exact now: each member sends its contribution plus what q8 dropped, and drops nothing.
  const Gathered r = AllGatherAll(g, 1, weights);
  std::vector<float> expected(g.values[0].size(), 0.0f);
  for (int m = 0; m < 2; ++m) {
    REQUIRE(r.status[m].ok());
    for (size_t k = 0; k < g.routes[m].size(); ++k) {
      const fleet::SyncSlice& slice = g.routes[m][k].slice;
      for (int64_t j = 0; j < slice.size; ++j) {
        const size_t at = static_cast<size_t>(slice.offset + j);
        expected[at] += weights[m] * (g.values[m][at] + residuals[m][k][j]);
      }
    }
  }
  CHECK(SameBits(r.out[0], expected));
  CHECK(SameBits(r.out[1], expected));
  CHECK(g.x[0]->SetCodec("adaptive", "").code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("sync exchange: a streaming sync gives AllGather's bits") {
  const bool ring = GENERATE(false, true);
  INFO((ring ? "ring" : "gather"));
  SyncGroup g({.replicas = 3, .ring = ring});
  const std::vector<float> weights = Weights(3);
  const Gathered blocking = AllGatherAll(g, 0, weights);
  std::vector<std::vector<float>> out(3);
  CHECK(g.x[0]->Finish(out[0]).code() == absl::StatusCode::kFailedPrecondition);  // none yet
  for (int i = 0; i < 3; ++i) {
    REQUIRE(blocking.status[i].ok());
    REQUIRE(g.x[i]->Start(1, g.values[i], weights).ok());
    CHECK(g.x[i]->in_flight());
  }
  // One sync at a time; the codec stays while one is in flight.
  CHECK(g.x[0]->Start(2, g.values[0], weights).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(g.x[0]->SetCodec("q8", "").code() == absl::StatusCode::kFailedPrecondition);
  for (int i = 2; i >= 0; --i) {  // in any order: each took the others' frames meanwhile
    out[i].assign(g.values[i].size(), -1.0f);
    REQUIRE(g.x[i]->Finish(out[i]).ok());
    CHECK_FALSE(g.x[i]->in_flight());
    CHECK(SameBits(out[i], blocking.out[i]));
    CHECK(g.x[i]->Report().syncs() == 2);
  }
}

TEST_CASE("sync exchange: its seconds are read off its file env's clock (a fake one here)") {
  testing::FakeClockEnv clock;  // at 100 s, until the test moves it
  SyncGroup g({.replicas = 2, .file_env = &clock});
  const std::vector<float> weights = Weights(2);
  std::vector<std::vector<float>> out = {std::vector<float>(g.values[0].size()),
                                         std::vector<float>(g.values[1].size())};

  // Streaming: stage 0 starts at 100 s, its peer only at 130 s, so stage 0's frames cannot all
  // be in before 130 s; both finish then. Stage 0's sync ran 30 s behind its steps and exposed
  // none of it (Start took no time on this clock, and Finish waited none); stage 1's ran at once.
  REQUIRE(g.x[0]->Start(0, g.values[0], weights).ok());
  clock.now = 130.0;
  REQUIRE(g.x[1]->Start(0, g.values[1], weights).ok());
  REQUIRE(g.x[0]->Finish(out[0]).ok());
  REQUIRE(g.x[1]->Finish(out[1]).ok());
  CHECK(g.x[0]->Report().hidden_seconds() == 30.0);
  CHECK(g.x[0]->Report().seconds() == 0.0);
  CHECK(g.x[0]->wait_seconds() == 0.0);
  CHECK(g.x[1]->Report().hidden_seconds() == 0.0);
  CHECK(g.x[1]->Report().seconds() == 0.0);

  // Blocking: stage 0 waits in AllGather from 200 s (its receiver blocked in the inbox) until
  // its peer joins at 207 s: 7 s exposed, all of it; the peer, whose frames were there, none.
  clock.now = 200.0;
  Status s0 = absl::UnknownError("not run");
  std::thread t([&] { s0 = g.x[0]->AllGather(1, g.values[0], weights, out[0]); });
  while (g.inboxes[0]->waiters() == 0) std::this_thread::yield();
  clock.now = 207.0;
  REQUIRE(g.x[1]->AllGather(1, g.values[1], weights, out[1]).ok());
  t.join();
  REQUIRE(s0.ok());
  CHECK(g.x[0]->Report().syncs() == 2);
  CHECK(g.x[0]->Report().seconds() == 7.0);
  CHECK(g.x[0]->Report().hidden_seconds() == 30.0);
  CHECK(g.x[1]->Report().seconds() == 0.0);
  CHECK(SameBits(out[0], out[1]));
}

TEST_CASE("sync exchange: a staggered sync carries only its phase's slices") {
  const bool ring = GENERATE(false, true);
  INFO((ring ? "ring" : "gather"));
  SyncGroup g({.replicas = 2, .ring = ring, .stagger = 2});
  const std::vector<float> weights = Weights(2);
  const Gathered r = AllGatherAll(g, 0, weights, /*phase=*/1);
  const std::vector<float> all = ring ? RingSum(g, 0, weights) : GatherSum(g, 0, weights);
  size_t in_phase = 0;
  int64_t phase_values = 0;
  for (const SyncRoute& route : g.routes[0]) {
    if (route.phase != 1) continue;
    ++in_phase;
    phase_values += route.slice.size;
  }
  REQUIRE(in_phase > 0);
  REQUIRE(in_phase < g.routes[0].size());
  CHECK(g.x[0]->PhaseValues(1) == phase_values);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(r.status[i].ok());
    for (const SyncRoute& route : g.routes[i]) {
      const auto got =
          std::span<const float>(r.out[i]).subspan(route.slice.offset, route.slice.size);
      if (route.phase == 1) {
        CHECK(SameBits(got,
                       std::span<const float>(all).subspan(route.slice.offset, route.slice.size)));
      } else {
        for (float v : got) REQUIRE(v == 0.0f);
      }
    }
    const size_t frames = ring ? in_phase * 2 : in_phase;  // a ring of 2: two hops
    CHECK(g.link(i, 1 - i).delivered().size() == frames);
  }
}

TEST_CASE("sync exchange: a dropped replica is neither sent to nor waited for") {
  const bool ring = GENERATE(false, true);
  INFO((ring ? "ring" : "gather"));
  SyncGroup g({.replicas = 3, .ring = ring, .live = {true, false, true}});
  // Its weight is ignored; a frame of it waiting in an inbox is not taken.
  const std::vector<float> weights = {0.25f, 9.0f, 0.75f};
  if (!ring) {
    Inject(g.inbox(0), 0, 1, g.routes[0][0].slice.index, "beta",
           Fp32Frame(std::vector<float>(static_cast<size_t>(g.routes[0][0].slice.size), 1e6f),
                     {g.routes[0][0].slice.size}));
  }
  const size_t waiting = g.inbox(0).bytes();
  const Gathered r = AllGatherAll(g, 0, weights);
  for (int i : {0, 2}) {
    INFO("stage " << i);
    REQUIRE(r.status[i].ok());
    CHECK(SameBits(r.out[i], ring ? RingSum(g, i, weights) : GatherSum(g, i, weights)));
    CHECK(g.x[i]->SendsTo() == std::vector<int>{2 - i});
    CHECK(g.link(i, 1).attempts() == 0);
  }
  CHECK(SameBits(r.out[0], r.out[2]));
  CHECK(g.inbox(0).bytes() == waiting);         // the dropped replica's frame still there
  if (ring) CHECK(g.x[0]->SentShare() == 1.0);  // a ring of two
}

TEST_CASE("sync exchange: a replica that leaves at a step is out of that sync and every later") {
  // Three replicas sync once; replica 1 leaves (StepDecision.removed_replicas): the others'
  // next syncs are the two's, gathered or around the ring of two, as if it had been dropped.
  const bool ring = GENERATE(false, true);
  INFO((ring ? "ring" : "gather"));
  SyncGroup g({.replicas = 3, .ring = ring});
  const std::vector<float> weights = Weights(3);
  const Gathered first = AllGatherAll(g, 0, weights);
  for (int i = 0; i < 3; ++i) REQUIRE(first.status[i].ok());
  // What no stage takes: its own replica, one outside the grid.
  CHECK(absl::IsInvalidArgument(g.x[0]->Leave(std::vector<uint32_t>{0})));
  CHECK(absl::IsInvalidArgument(g.x[0]->Leave(std::vector<uint32_t>{3})));
  // What each stage sent replica 1's stage so far.
  auto wire_to_1 = [&](int i) {
    for (const OutboundUsage& u : g.x[i]->Usage()) {
      if (u.to_site == SyncSite(1)) return u.wire_bytes;
    }
    return uint64_t{0};
  };
  const uint64_t to_1[] = {wire_to_1(0), 0, wire_to_1(2)};
  for (int i : {0, 2}) REQUIRE(g.x[i]->Leave(std::vector<uint32_t>{1}).ok());
  g.live = {true, false, true};
  const uint64_t sent_to_1 = g.link(0, 1).attempts() + g.link(2, 1).attempts();
  const std::vector<float> two = {0.25f, 0.0f, 0.75f};
  const Gathered r = AllGatherAll(g, 1, two);
  for (int i : {0, 2}) {
    INFO("stage " << i);
    REQUIRE(r.status[i].ok());
    CHECK(SameBits(r.out[i], ring ? RingSum(g, i, two) : GatherSum(g, i, two)));
    CHECK(g.x[i]->SendsTo() == std::vector<int>{2 - i});
    // The usage names the stage sent to now (a ring's next member changed), and keeps what
    // went to the leaver: its bytes stay counted.
    bool to_other = false;
    for (const OutboundUsage& u : g.x[i]->Usage())
      to_other = to_other || u.to_site == SyncSite(2 - i);
    CHECK(to_other);
    CHECK(wire_to_1(i) == to_1[i]);
    CHECK(g.x[i]->Report().syncs() == 2);
  }
  CHECK(SameBits(r.out[0], r.out[2]));
  CHECK(g.link(0, 1).attempts() + g.link(2, 1).attempts() == sent_to_1);  // nothing more to it
  if (ring) CHECK(g.x[0]->SentShare() == 1.0);                            // a ring of two
}

TEST_CASE("sync exchange: a send that may heal is retried and the sync completes") {
  SyncGroup g({.replicas = 2});
  g.link(0, 1).Script(
      {absl::UnavailableError("connection reset"), absl::UnavailableError("connection reset")});
  const std::vector<float> weights = Weights(2);
  const Gathered r = AllGatherAll(g, 0, weights);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(r.status[i].ok());
    CHECK(SameBits(r.out[i], GatherSum(g, i, weights)));
  }
  CHECK(g.senders.at({0, 1})->stats().retries == 2);
  CHECK(g.senders.at({0, 1})->error().ok());
}

// A link that stays down is not a refusal: its sender retries until closed, and the member
// waiting for its frames waits until the stage is stopped (the coordinator's call), not
// with an error of its own.
TEST_CASE("sync exchange: frames over a link that stays down are waited for until a stop") {
  SyncGroup g({.replicas = 2});
  g.link(0, 1).Script(std::vector<Status>(1000, absl::UnavailableError("no route to beta")));
  const std::vector<float> weights = Weights(2);
  for (int i = 0; i < 2; ++i) REQUIRE(g.x[i]->Start(0, g.values[i], weights).ok());
  std::vector<float> out0(g.values[0].size()), out1(g.values[1].size());
  REQUIRE(g.x[0]->Finish(out0).ok());  // alpha has beta's frames
  CHECK(SameBits(out0, GatherSum(g, 0, weights)));
  testing::WaitFor([&] { return g.link(0, 1).attempts() >= 2; }, std::chrono::seconds(10));
  CHECK(g.senders.at({0, 1})->error().ok());
  g.stop = true;
  const Status s = g.x[1]->Finish(out1);
  CHECK(s.code() == absl::StatusCode::kAborted);
}

TEST_CASE("sync exchange: a refused frame ends the wait with the refusal, naming the peer") {
  const bool ring = GENERATE(false, true);
  const bool at_delivery = GENERATE(false, true);
  INFO((ring ? "ring" : "gather") << (at_delivery ? ", refused by beta's inbox" : ""));
  SyncGroup g({.replicas = 2, .ring = ring});
  if (at_delivery) {
    g.inbox(1).StartAttempt(kAttempt + 1, 0);  // beta moved on: it refuses attempt 1's frames
  } else {
    g.link(0, 1).Script({absl::InvalidArgumentError("beta does not take slice frames")});
  }
  // Only alpha syncs: beta never sends, so alpha's wait can end only with the refusal. Its
  // frames are all queued before the link passes them on: the refusal comes while it waits.
  g.link(0, 1).Hold();
  REQUIRE(g.x[0]->Start(0, g.values[0], Weights(2)).ok());
  g.link(0, 1).Release();
  std::vector<float> out(g.values[0].size());
  const Status s = g.x[0]->Finish(out);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() ==
        (at_delivery ? absl::StatusCode::kFailedPrecondition : absl::StatusCode::kInvalidArgument));
  CHECK_THAT(std::string(s.message()), Catch::Contains("to site 'beta' failed"));
  CHECK_THAT(std::string(s.message()), Catch::Contains("TENSOR_KIND_SYNC"));
  if (!at_delivery) {
    CHECK_THAT(std::string(s.message()), Catch::Contains("beta does not take slice frames"));
  }
  CHECK_FALSE(g.x[0]->in_flight());
}

TEST_CASE("sync exchange: a stop ends a wait") {
  const bool ring = GENERATE(false, true);
  INFO((ring ? "ring" : "gather"));
  SyncGroup g({.replicas = 2, .ring = ring});
  std::vector<float> out(g.values[0].size());
  Status s;
  std::thread syncing([&] { s = g.x[0]->AllGather(0, g.values[0], Weights(2), out); });
  // Stop once alpha waits on its inbox (the outcome is the same if it comes earlier).
  testing::WaitFor([&] { return g.inbox(0).waiters() > 0; }, std::chrono::seconds(10));
  g.stop = true;
  syncing.join();
  CHECK(s.code() == absl::StatusCode::kAborted);
}

TEST_CASE("sync exchange: a cancelled sync leaves the exchange ready for the next") {
  SyncGroup g({.replicas = 2});
  const std::vector<float> weights = Weights(2);
  REQUIRE(g.x[0]->Start(0, g.values[0], weights).ok());
  g.x[0]->Cancel();
  CHECK_FALSE(g.x[0]->in_flight());
  std::vector<float> out(g.values[0].size());
  CHECK(g.x[0]->Finish(out).code() == absl::StatusCode::kFailedPrecondition);
  const Gathered r = AllGatherAll(g, 1, weights);
  for (int i = 0; i < 2; ++i) {
    REQUIRE(r.status[i].ok());
    CHECK(SameBits(r.out[i], GatherSum(g, i, weights)));
  }
}

TEST_CASE("sync exchange: a frame that is not its slice's is refused, naming it and its site") {
  enum Bad { kShort, kLong, kCorrupt };
  const Bad bad = GENERATE(kShort, kLong, kCorrupt);
  const bool ring = GENERATE(false, true);
  INFO("bad " << bad << (ring ? ", ring" : ", gather"));
  SyncGroup g({.replicas = 2, .ring = ring});
  const fleet::SyncSlice& slice = g.routes[0][0].slice;
  // Gathered: beta's whole slice; around a ring of two: hop 0 brings chunk 1, half of it.
  const int64_t n = ring ? fleet::RingChunkOf(slice.size, 2, 1).size() : slice.size;
  std::vector<uint8_t> frame;
  if (bad == kShort) frame = testing::ZeroFrame({n - 1});
  if (bad == kLong) frame = testing::ZeroFrame({n + 1});
  if (bad == kCorrupt) {
    frame = Fp32Frame(std::vector<float>(static_cast<size_t>(n), 0.5f), {n});
    frame.back() ^= 0x5a;  // the checksum no longer holds
  }
  Inject(g.inbox(0), 0, /*microbatch: beta's replica, or hop 0=*/ring ? 0 : 1, slice.index, "beta",
         frame);
  std::vector<float> out(g.values[0].size());
  const Status s = g.x[0]->AllGather(0, g.values[0], Weights(2), out);
  INFO(s.ToString());
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("from beta"));
  CHECK_THAT(std::string(s.message()), Catch::Contains("TENSOR_KIND_SYNC"));
  if (bad == kShort) {
    CHECK_THAT(std::string(s.message()),
               Catch::Contains(std::to_string(n - 1) + " values, the " +
                               (ring ? "chunk" : "slice") + " has " + std::to_string(n)));
  }
}

TEST_CASE("sync exchange: what is not a sync of its fragment is refused before anything is sent") {
  SyncGroup g({.replicas = 2});
  std::vector<float> out(g.values[0].size());
  CHECK(g.x[0]->AllGather(0, g.values[0], std::vector<float>{1.0f}, out).code() ==
        absl::StatusCode::kInvalidArgument);  // a weight per replica
  const std::vector<float> shorter(g.values[0].begin(), g.values[0].end() - 1);
  std::vector<float> shorter_out(shorter.size());
  CHECK(g.x[0]->AllGather(0, shorter, Weights(2), shorter_out).code() ==
        absl::StatusCode::kInvalidArgument);  // the last slice outside it
  std::vector<float> small(out.size() - 1);
  CHECK(g.x[0]->AllGather(0, g.values[0], Weights(2), small).code() ==
        absl::StatusCode::kInvalidArgument);  // a result of another size
  CHECK(g.link(0, 1).attempts() == 0);
  CHECK_FALSE(g.x[0]->in_flight());

  SyncExchangeOptions no_inbox = g.Options(0);
  no_inbox.inbox = nullptr;
  CHECK(SyncExchange::Create(no_inbox).status().code() == absl::StatusCode::kInvalidArgument);
  SyncExchangeOptions liveness = g.Options(0);
  liveness.live = {true, true, true};
  CHECK(SyncExchange::Create(liveness).status().code() == absl::StatusCode::kInvalidArgument);
  SyncExchangeOptions no_sender = g.Options(0);
  no_sender.to_stage.clear();
  CHECK(SyncExchange::Create(no_sender).status().code() == absl::StatusCode::kFailedPrecondition);
  SyncExchangeOptions adaptive = g.Options(0);
  adaptive.codec = "adaptive";
  CHECK_FALSE(SyncExchange::Create(adaptive).ok());
}

}  // namespace
}  // namespace longhaul::daemon

namespace longhaul::daemon {
namespace {

// Stage i's gossip frames of `values` (every coordinate, weight 1), by route.
// Each route's one frame for every out-neighbour.
std::vector<std::vector<std::vector<uint8_t>>> GossipFrames(const testing::SyncGroup& g, int i) {
  std::vector<std::vector<std::vector<uint8_t>>> frames;
  for (const SyncRoute& route : g.routes[i]) {
    const fleet::SyncSlice& s = route.slice;
    std::vector<uint32_t> all(static_cast<size_t>(s.size));
    for (size_t c = 0; c < all.size(); ++c) all[c] = static_cast<uint32_t>(c);
    const std::vector<float> ones(all.size(), 1.0f);
    frames.push_back({fleet::EncodeGossipFrame(
        static_cast<uint32_t>(s.index), all,
        std::span<const float>(g.values[i]).subspan(static_cast<size_t>(s.offset), all.size()),
        ones)});
  }
  return frames;
}

TEST_CASE(
    "sync exchange: a gossip round sends to its out-neighbours only, takes its in-neighbours'") {
  // Three single-stage replicas: 0 -> 1, 1 -> 2, 2 -> 0 and 1 (the sync after step 2: its
  // inboxes take steps up to 2). Every stage gets exactly its in-neighbours' frames, in the
  // order it named them; nothing goes where the graph has no edge.
  testing::SyncGroup g({.replicas = 3});
  const std::vector<std::vector<int>> to = {{1}, {2}, {0, 1}}, from = {{2}, {0, 2}, {1}};
  std::vector<Status> status(3);
  std::vector<std::vector<std::vector<fleet::GossipFrame>>> got(3);
  std::vector<std::vector<int>> senders(3), unsent(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      status[i] = g.x[i]->Gossip(1, 0, GossipFrames(g, i), to[i], from[i], &got[i], &senders[i],
                                 &unsent[i]);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 3; ++i) {
    INFO("stage " << i);
    REQUIRE(status[i].ok());
    CHECK(senders[i] == from[i]);
    CHECK(unsent[i].empty());
    REQUIRE(got[i].size() == g.routes[i].size());
    for (size_t k = 0; k < g.routes[i].size(); ++k) {
      const fleet::SyncSlice& s = g.routes[i][k].slice;
      REQUIRE(got[i][k].size() == from[i].size());
      for (size_t n = 0; n < from[i].size(); ++n) {
        const fleet::GossipFrame& f = got[i][k][n];
        CHECK(f.slice == static_cast<uint32_t>(s.index));
        const std::vector<float>& sender = g.values[from[i][n]];
        CHECK(SameBits(f.x, std::vector<float>(sender.begin() + s.offset,
                                               sender.begin() + s.offset + s.size)));
      }
    }
    CHECK(g.x[i]->Report().syncs() == 1);
    for (int d = 0; d < 3; ++d) {
      if (d == i) continue;
      const bool edge = std::find(to[i].begin(), to[i].end(), d) != to[i].end();
      CHECK(g.link(i, d).delivered().size() == (edge ? g.routes[i].size() : 0));
    }
  }
}

TEST_CASE("sync exchange: a gossip frame that is not its slice's is refused, naming the sender") {
  testing::SyncGroup g({.replicas = 2});
  // Replica 1's "frames": each slice's frame names slice 0's index and size.
  const auto frames = GossipFrames(g, 1);
  for (size_t k = 0; k < g.routes[0].size(); ++k) {
    Inject(g.inbox(0), 2, 1, g.routes[0][k].slice.index, "beta", frames[0][0]);
  }
  std::vector<std::vector<fleet::GossipFrame>> got;
  std::vector<int> senders, unsent;
  const std::vector<std::vector<std::vector<uint8_t>>> none(g.routes[0].size());
  const Status s =
      g.x[0]->Gossip(2, 0, none, std::vector<int>{}, std::vector<int>{1}, &got, &senders, &unsent);
  INFO(s.ToString());
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("from beta"));
  CHECK_THAT(std::string(s.message()), Catch::Contains("gossip frame of slice"));
  CHECK(g.link(0, 1).attempts() == 0);  // no out-neighbour: nothing sent
}

TEST_CASE("sync exchange: gossip goes on without a replica whose stage is gone") {
  // Three single-stage replicas, each sending to and taking from both others; replica 2's
  // stage never runs. While its status is not known (kStarting) a round waits for it; once
  // it is gone the two others each end the round with the other's frames only. In later
  // rounds it is asked for at once and, still not running, gets no frames (unsent: the
  // sender keeps that share). Once it runs this attempt again it is sent to and waited for.
  testing::SyncGroup g({.replicas = 3});
  std::atomic<int> asked{0};
  std::atomic<PeerStatus> status2{PeerStatus::kStarting};
  std::mutex told_mu;
  std::vector<std::tuple<int, int, uint64_t>> told;  // (stage, replica left out, step)
  for (int i = 0; i < 2; ++i) {
    SyncExchangeOptions o = g.Options(i);
    o.gossip_grace_seconds = 0.1;
    o.on_unsent = [&, i](int replica, uint64_t step) {
      std::lock_guard<std::mutex> lock(told_mu);
      told.emplace_back(i, replica, step);
    };
    o.peer_status = [&](int stage) {
      if (stage != 2) return PeerStatus::kRunning;
      ++asked;
      return status2.load();
    };
    auto made = SyncExchange::Create(std::move(o));
    REQUIRE(made.ok());
    g.x[i] = std::move(*made);
  }
  // Replica 2 is gone once both have asked after it a few times.
  std::thread gone([&] {
    testing::WaitFor([&] { return asked >= 4; }, std::chrono::seconds(30));
    status2 = PeerStatus::kGone;
  });
  auto round = [&](uint64_t step, bool first) {
    for (int i = 0; i < 3; ++i) g.inbox(i).AdvanceTo(step);
    std::vector<Status> status(2);
    std::vector<std::vector<std::vector<fleet::GossipFrame>>> got(2);
    std::vector<std::vector<int>> senders(2), unsent(2);
    const std::vector<std::vector<int>> peers = {{1, 2}, {0, 2}};
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        status[i] = g.x[i]->Gossip(step, 0, GossipFrames(g, i), peers[i], peers[i], &got[i],
                                   &senders[i], &unsent[i]);
      });
    }
    for (auto& t : threads) t.join();
    for (int i = 0; i < 2; ++i) {
      INFO("stage " << i << " after step " << step);
      REQUIRE(status[i].ok());
      CHECK(senders[i] == std::vector<int>{1 - i});
      CHECK(unsent[i] == (first ? std::vector<int>{} : std::vector<int>{2}));
      REQUIRE(got[i].size() == g.routes[i].size());
      for (size_t k = 0; k < got[i].size(); ++k) {
        REQUIRE(got[i][k].size() == 1);
        const fleet::SyncSlice& s = g.routes[i][k].slice;
        const std::vector<float>& sender = g.values[1 - i];
        CHECK(SameBits(got[i][k][0].x, std::vector<float>(sender.begin() + s.offset,
                                                          sender.begin() + s.offset + s.size)));
      }
    }
  };
  round(1, /*first=*/true);
  gone.join();
  round(2, false);
  round(3, false);
  CHECK(g.x[0]->gossip_losses() == 1);  // lost in the first round, not back since
  CHECK(g.x[1]->gossip_losses() == 1);
  {  // each told of the rounds it left replica 2 out of, for replica 2's asking
    std::lock_guard<std::mutex> lock(told_mu);
    std::sort(told.begin(), told.end());
    CHECK(told ==
          std::vector<std::tuple<int, int, uint64_t>>{{0, 2, 2}, {0, 2, 3}, {1, 2, 2}, {1, 2, 3}});
  }
  // Frames went to it in the first round only (the senders deliver on their own threads).
  const size_t first_round = g.routes[0].size();
  CHECK(testing::WaitFor([&] { return g.link(0, 2).delivered().size() == first_round; },
                         std::chrono::seconds(30)));
  CHECK(testing::WaitFor([&] { return g.link(1, 2).delivered().size() == first_round; },
                         std::chrono::seconds(30)));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(g.link(0, 2).delivered().size() == first_round);
  // Its stage runs this attempt again: it is sent to, and the round waits for its frames,
  // which come late.
  status2 = PeerStatus::kRunning;
  g.inbox(0).AdvanceTo(4);
  std::vector<std::vector<fleet::GossipFrame>> got;
  std::vector<int> senders, unsent;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    const auto frames = GossipFrames(g, 2);
    for (size_t k = 0; k < g.routes[0].size(); ++k) {
      Inject(g.inbox(0), 4, 2, g.routes[0][k].slice.index, "gamma", frames[k][0]);
    }
  });
  const Status s = g.x[0]->Gossip(4, 0, GossipFrames(g, 0), std::vector<int>{2},
                                  std::vector<int>{2}, &got, &senders, &unsent);
  late.join();
  INFO(s.ToString());
  REQUIRE(s.ok());
  CHECK(senders == std::vector<int>{2});
  CHECK(unsent.empty());
  CHECK(testing::WaitFor([&] { return g.link(0, 2).delivered().size() == 2 * first_round; },
                         std::chrono::seconds(30)));
}

TEST_CASE(
    "sync exchange: a running sender that left this replica out of a round is not waited for") {
  // Two single-stage replicas. Replica 1's stage runs, but it left replica 0 out of this round
  // (it found replica 0 lost while a link between them was down): replica 0 asks it, learns
  // so, and ends the round without its frames instead of waiting for frames that will not
  // come. It is not counted lost: the next round sends to it as before.
  testing::SyncGroup g({.replicas = 2});
  std::atomic<int> asked{0};
  SyncExchangeOptions o = g.Options(0);
  o.gossip_grace_seconds = 0.05;
  o.peer_status = [](int) { return PeerStatus::kRunning; };
  o.skipped_me = [&](int stage, uint64_t step) {
    ++asked;
    return stage == 1 && step == 7;
  };
  std::vector<std::pair<int, uint64_t>> told;
  o.on_unsent = [&](int replica, uint64_t step) { told.emplace_back(replica, step); };
  auto made = SyncExchange::Create(std::move(o));
  REQUIRE(made.ok());
  g.x[0] = std::move(*made);
  g.inbox(0).AdvanceTo(7);
  std::vector<std::vector<fleet::GossipFrame>> got;
  std::vector<int> senders, unsent;
  const Status s = g.x[0]->Gossip(7, 0, GossipFrames(g, 0), std::vector<int>{1},
                                  std::vector<int>{1}, &got, &senders, &unsent);
  INFO(s.ToString());
  REQUIRE(s.ok());
  CHECK(asked >= 1);
  CHECK(senders.empty());
  CHECK(unsent.empty());  // its own frame went: replica 1 is not lost
  CHECK(told.empty());
  CHECK(testing::WaitFor([&] { return g.link(0, 1).attempts() > 0; }, std::chrono::seconds(30)));
}

TEST_CASE("sync exchange: a replica removed from the job is neither sent to nor waited for") {
  // Two single-stage replicas, each sending to and taking from the other; replica 1 removed
  // (its stage answers kGone, as a removed replica's does). Replica 0's round ends at once with
  // nothing sent and nothing taken: its share stays (unsent), no grace is waited out.
  testing::SyncGroup g({.replicas = 2});
  SyncExchangeOptions o = g.Options(0);
  o.gossip_grace_seconds = 3600;  // a wait for replica 1 would outlast the test
  o.peer_status = [](int stage) { return stage == 1 ? PeerStatus::kGone : PeerStatus::kRunning; };
  o.removed = [](int replica) { return replica == 1; };
  auto made = SyncExchange::Create(std::move(o));
  REQUIRE(made.ok());
  g.x[0] = std::move(*made);
  std::vector<std::vector<fleet::GossipFrame>> got;
  std::vector<int> senders, unsent;
  const Status s = g.x[0]->Gossip(1, 0, GossipFrames(g, 0), std::vector<int>{1},
                                  std::vector<int>{1}, &got, &senders, &unsent);
  INFO(s.ToString());
  REQUIRE(s.ok());
  CHECK(senders.empty());
  CHECK(unsent == std::vector<int>{1});
  CHECK(g.link(0, 1).attempts() == 0);
}

}  // namespace
}  // namespace longhaul::daemon
