// StageAdmission (daemon/job/checks/stage_admission.h) on its own, with no daemon: a job of 2
// pipeline replicas x 2 stages on sites a, b (replica 0) and c, d (replica 1). Stage 1 (site b)
// takes its neighbour's activations and targets and its tied partner's embedding gradient in
// the shapes its layers need, and replica 1's stage 3 sync frames for the slices they share, at
// the steps those slices sync; every other sender, shape, step, microbatch, attempt, slice or
// a header that does not parse is refused with the status and the names the header promises.
#include "daemon/job/checks/stage_admission.h"

#include <xxhash.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/frame.h"
#include "daemon/job/exchange/grad_sums_frame.h"
#include "daemon/job/spec/job_spec.h"
#include "daemon/job/sync/sync_routes.h"
#include "daemon/job/sync/tied_round.h"
#include "fleet/gossip_link_node.h"
#include "fleet/gossip_node.h"
#include "model/layout.h"

namespace longhaul::daemon {
namespace {

constexpr int kSteps = 10, kEvery = 5;

JobSpec Spec() {
  auto spec = ParseJobSpec(
      "name: r\nmodel: {layers: 4, channels: 32, heads: 2, vocab: 256, context: 32}\n"
      "data: {train: builtin}\nsteps: 10\nbatch_size: 4\nmicrobatch_size: 2\nseq_len: 32\n"
      "sites: [a, b, c, d]\nplacement: even\nreplicas: 2\n"
      "sync: {mode: local, every: 5, codec: exact}\n",
      "job.yaml", ".");
  REQUIRE(spec.ok());
  return *spec;
}

v1::StageAssignment Assignment(int self, std::vector<uint32_t> dropped = {}) {
  v1::StageAssignment a;
  a.set_job_id("j-000001");
  a.set_attempt(3);
  a.set_stage(static_cast<uint32_t>(self));
  const char* sites[] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; ++i) {
    v1::StageInfo* s = a.add_stages();
    s->set_index(static_cast<uint32_t>(i));
    s->set_site(sites[i]);
    s->set_layer_begin(i % 2 == 0 ? 0 : 2);
    s->set_layer_end(i % 2 == 0 ? 2 : 4);
    s->set_replica(static_cast<uint32_t>(i / 2));
  }
  for (uint32_t r : dropped) a.add_dropped_replicas(r);
  return a;
}

// A tensor's metadata and its whole fp32 frame of `shape`.
struct Tensor {
  v1::TensorFrame first;
  std::vector<uint8_t> frame;
};

Tensor Make(v1::TensorKind kind, int from, int to, std::vector<int64_t> shape, uint64_t step = 0,
            uint32_t microbatch = 0, uint32_t tensor_id = 0, uint32_t attempt = 3) {
  Tensor t;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const std::vector<float> values(static_cast<size_t>(n), 0.5f);
  auto codec = compression::MakeCodec("fp32");
  REQUIRE(codec.ok());
  REQUIRE(compression::EncodeFrame(**codec, values, shape, {}, &t.frame).ok());
  t.first.set_job_id("j-000001");
  t.first.set_attempt(attempt);
  t.first.set_step(step);
  t.first.set_microbatch(microbatch);
  t.first.set_kind(kind);
  t.first.set_tensor_id(tensor_id);
  t.first.set_from_stage(static_cast<uint32_t>(from));
  t.first.set_to_stage(static_cast<uint32_t>(to));
  t.first.set_encoded_size(t.frame.size());
  return t;
}

Status Check(const StageAdmission& admission, const Tensor& t, const std::string& caller) {
  return admission.Check(t.first, t.frame, caller);
}

// Stage 1's sync routes in `spec`'s plan `a` (one at least).
std::vector<SyncRoute> StageOneRoutes(const JobSpec& spec, const v1::StageAssignment& a) {
  const StageGrid grid = StageGrid::OfPlan(spec.replicas, a.stages());
  std::vector<SyncRoute> routes = SyncRoutes(grid, spec.job.model, 1, spec.sync.stagger);
  REQUIRE_FALSE(routes.empty());
  return routes;
}

bool Names(const Status& s, const std::string& what) {
  return std::string(s.message()).find(what) != std::string::npos;
}

TEST_CASE("a stage admits its neighbours' tensors in the shapes its layers need", "[admission]") {
  const JobSpec spec = Spec();
  const StageAdmission admission("b", Assignment(1), spec);
  CHECK(admission.attempt() == 3);
  CHECK(admission.steps() == kSteps);
  const int64_t B = 2, T = 32, C = 32, Vp = spec.job.model.padded_vocab_size;

  CHECK(Check(admission, Make(v1::TENSOR_KIND_ACTIVATION, 0, 1, {B, T, C}), "a").ok());
  CHECK(Check(admission, Make(v1::TENSOR_KIND_TARGETS, 0, 1, {B, T}, 9, 1), "a").ok());
  // First and last stage of a 2-stage replica: the tied partner is the neighbour.
  CHECK(Check(admission, Make(v1::TENSOR_KIND_WEIGHT_GRAD, 0, 1, {Vp, C}), "a").ok());

  SECTION("a sender that is not the stage it claims, or not a neighbour") {
    Status s = Check(admission, Make(v1::TENSOR_KIND_ACTIVATION, 0, 1, {B, T, C}), "c");
    CHECK(absl::IsPermissionDenied(s));
    CHECK(Names(s, "'c'"));
    s = Check(admission, Make(v1::TENSOR_KIND_ACTIVATION, 2, 1, {B, T, C}), "c");  // other replica
    CHECK(absl::IsPermissionDenied(s));
    // Gradients come from the next stage, which stage 1 (last of its replica) has none of.
    CHECK(absl::IsPermissionDenied(
        Check(admission, Make(v1::TENSOR_KIND_ACTIVATION_GRAD, 0, 1, {B, T, C}), "a")));
    // Addressed to another stage, or from a stage outside the plan.
    CHECK(absl::IsPermissionDenied(
        Check(admission, Make(v1::TENSOR_KIND_ACTIVATION, 0, 3, {B, T, C}), "a")));
    CHECK(absl::IsPermissionDenied(
        Check(admission, Make(v1::TENSOR_KIND_ACTIVATION, 9, 1, {B, T, C}), "a")));
  }
  SECTION("a shape, size, step or microbatch outside the stage") {
    Status s = Check(admission, Make(v1::TENSOR_KIND_ACTIVATION, 0, 1, {B, T, C / 2}), "a");
    CHECK(absl::IsInvalidArgument(s));
    CHECK(Names(s, "[2,32,32]"));
    Tensor t = Make(v1::TENSOR_KIND_ACTIVATION, 0, 1, {B, T, C});
    t.first.set_encoded_size(t.frame.size() + 1);  // announced size is not the frame's
    CHECK(absl::IsInvalidArgument(Check(admission, t, "a")));
    s = Check(admission, Make(v1::TENSOR_KIND_ACTIVATION, 0, 1, {B, T, C}, kSteps), "a");
    CHECK(absl::IsInvalidArgument(s));
    CHECK(Names(s, "outside the job"));
    // 2 microbatches per step for each replica (batch 4 of 2), ids 0 and 1.
    CHECK(absl::IsInvalidArgument(
        Check(admission, Make(v1::TENSOR_KIND_ACTIVATION, 0, 1, {B, T, C}, 0, 2), "a")));
    CHECK(absl::IsInvalidArgument(
        Check(admission, Make(v1::TENSOR_KIND_ACTIVATION, 0, 1, {B, T, C}, 0, 0, 1), "a")));
  }
  SECTION("a header that does not parse is data loss") {
    Tensor t = Make(v1::TENSOR_KIND_ACTIVATION, 0, 1, {B, T, C});
    for (size_t i = 0; i < 8 && i < t.frame.size(); ++i) t.frame[i] ^= 0xff;
    CHECK(absl::IsDataLoss(Check(admission, t, "a")));
    CHECK(absl::IsDataLoss(admission.Check(t.first, {}, "a")));
  }
}

// A grad-sums frame (GRAD_SUMS or GRAD_TOTAL) of `sums` from stage `from` to `to`.
Tensor GradSums(v1::TensorKind kind, int from, int to, std::vector<double> sums,
                uint64_t step = 0) {
  Tensor t = Make(kind, from, to, {1}, step);  // its header; the payload replaced
  t.frame = EncodeGradSums(sums);
  t.first.set_encoded_size(t.frame.size());
  return t;
}

TEST_CASE("a gossip replica's stages pass gradient sums along their own pipeline only",
          "[admission]") {
  // Replica 0 is stages 0 (site a) and 1 (b): the sums go 1 -> 0, the total 0 -> 1.
  JobSpec spec = Spec();
  const size_t slices = static_cast<size_t>(model::ParameterLayout(spec.job.model).num_slices());
  const std::vector<double> sums(slices, 0.25);
  SECTION("without gossip the kinds are refused") {
    const StageAdmission first("a", Assignment(0), spec);
    CHECK(absl::IsPermissionDenied(
        Check(first, GradSums(v1::TENSOR_KIND_GRAD_SUMS, 1, 0, sums), "b")));
  }
  spec.sync.reduce = fleet::SyncReduce::kGossip;
  const StageAdmission first("a", Assignment(0), spec), last("b", Assignment(1), spec);
  const Tensor up = GradSums(v1::TENSOR_KIND_GRAD_SUMS, 1, 0, sums, 4);
  const Tensor down = GradSums(v1::TENSOR_KIND_GRAD_TOTAL, 0, 1, sums, 4);
  CHECK(Check(first, up, "b").ok());
  CHECK(first.CheckWhole(up.first, up.frame, "b").ok());
  CHECK(Check(last, down, "a").ok());
  CHECK(last.CheckWhole(down.first, down.frame, "a").ok());
  // The wrong direction, another replica's stage, another site.
  CHECK(absl::IsPermissionDenied(
      Check(first, GradSums(v1::TENSOR_KIND_GRAD_TOTAL, 1, 0, sums), "b")));
  CHECK(
      absl::IsPermissionDenied(Check(last, GradSums(v1::TENSOR_KIND_GRAD_SUMS, 0, 1, sums), "a")));
  CHECK(
      absl::IsPermissionDenied(Check(first, GradSums(v1::TENSOR_KIND_GRAD_SUMS, 3, 0, sums), "d")));
  CHECK(absl::IsPermissionDenied(Check(first, up, "c")));
  // A frame of another size, step or microbatch.
  Status s = Check(first, GradSums(v1::TENSOR_KIND_GRAD_SUMS, 1, 0, {1.0, 2.0}), "b");
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "grad-sums frame"));
  CHECK(absl::IsInvalidArgument(
      Check(first, GradSums(v1::TENSOR_KIND_GRAD_SUMS, 1, 0, sums, kSteps), "b")));
  Tensor t = up;
  t.first.set_microbatch(1);
  CHECK(absl::IsInvalidArgument(Check(first, t, "b")));
  // The whole payload: a flipped byte, a negative sum.
  t = up;
  t.frame[20] ^= 1;
  s = first.CheckWhole(t.first, t.frame, "b");
  CHECK(absl::IsDataLoss(s));
  CHECK(Names(s, "checksum"));
  std::vector<double> negative = sums;
  negative[3] = -1;
  t = GradSums(v1::TENSOR_KIND_GRAD_SUMS, 1, 0, negative);
  s = first.CheckWhole(t.first, t.frame, "b");
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "sum 3"));
}

// A tied-embedding view (tied_round.h) of the sync after `step` (0-based) from stage `from` to
// stage `to` of Assignment's plan (replica 0: stages 0 and 1), saying replica 1's frame came.
Tensor TiedView(int from, int to, uint64_t step) {
  Tensor t = Make(v1::TENSOR_KIND_TIED_ROUND, from, to, {1}, step, kTiedView);  // payload replaced
  TiedRoundView v;
  v.step = step;
  v.came = {1};
  t.frame = EncodeTiedRoundView(v, 2, 0);
  t.first.set_encoded_size(t.frame.size());
  return t;
}

// The frames of the tied embedding the first stage (0) took in the round after `step`: replica
// 1's link frame (q4 over links) or gossip frame, from `to`'s replica's view.
Tensor TiedFrames(int from, int to, uint64_t step, const JobSpec& spec, bool links) {
  Tensor t = Make(v1::TENSOR_KIND_TIED_ROUND, from, to, {1}, step, kTiedFrames);
  const model::ParameterLayout layout(spec.job.model);
  const int wte = layout.SliceIndex(model::Tensor::kWte, 0);
  const size_t size = static_cast<size_t>(spec.job.model.padded_vocab_size) * 32;
  std::vector<float> x(size, 0.25f);
  std::vector<uint8_t> frame;
  if (links) {
    auto node = fleet::LinkGossipNode::Create(1, 2, {{wte, 0, static_cast<int64_t>(size)}}, size,
                                              "q4", false);
    REQUIRE(node.ok());
    (*node)->Reset(std::vector<float>(size, 0.0f));
    (*node)->BeginRound(x);
    auto f = (*node)->Frame(0, 0, 0, x);
    REQUIRE(f.ok());
    frame = std::move(*f);
  } else {
    std::vector<uint32_t> all(size);
    for (size_t c = 0; c < size; ++c) all[c] = static_cast<uint32_t>(c);
    frame = fleet::EncodeGossipFrame(static_cast<uint32_t>(wte), all, x,
                                     std::vector<float>(size, 1.0f));
  }
  t.frame = EncodeTiedFrames(step, std::vector<TiedFrame>{{1, frame}});
  t.first.set_encoded_size(t.frame.size());
  return t;
}

TEST_CASE("a gossip replica's first stage sends its last the round of the tied embedding",
          "[admission]") {
  // Replica 0 is stages 0 (site a) and 1 (b), the tied embedding's two holders; every 5 of 10
  // steps: rounds after steps 5 and 10 (0-based 4 and 9).
  JobSpec spec = Spec();
  const int64_t C = 32, Vp = spec.job.model.padded_vocab_size;
  SECTION("without gossip the kind is refused") {
    const StageAdmission first("a", Assignment(0), spec);
    const Status s = Check(first, TiedView(1, 0, 4), "b");
    CHECK(absl::IsPermissionDenied(s));
    CHECK(Names(s, "not a gossip job"));
  }
  spec.sync.reduce = fleet::SyncReduce::kGossip;
  const bool links = GENERATE(false, true);
  INFO((links ? "q4 links" : "fp32 frames"));
  if (links) spec.sync.codec = "q4";
  const StageAdmission first("a", Assignment(0), spec), last("b", Assignment(1), spec);
  // Views both ways after a round.
  for (const Tensor& t : {TiedView(1, 0, 4), TiedView(1, 0, 9)}) {
    CHECK(Check(first, t, "b").ok());
    CHECK(first.CheckWhole(t.first, t.frame, "b").ok());
  }
  CHECK(Check(last, TiedView(0, 1, 4), "a").ok());
  // Another replica's stage, another site, another stage of this one's, another addressee.
  CHECK(absl::IsPermissionDenied(Check(first, TiedView(3, 0, 4), "d")));
  CHECK(absl::IsPermissionDenied(Check(first, TiedView(1, 0, 4), "c")));
  CHECK(absl::IsPermissionDenied(Check(first, TiedView(2, 0, 4), "c")));
  CHECK(absl::IsPermissionDenied(Check(first, TiedView(1, 2, 4), "b")));
  // Not after a round; past the job; another size or tensor; a microbatch that is none of the
  // kind's.
  Status s = Check(first, TiedView(1, 0, 2), "b");
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "not after a sync step"));
  CHECK(absl::IsInvalidArgument(Check(first, TiedView(1, 0, kSteps), "b")));
  Tensor t = TiedView(1, 0, 4);
  t.first.set_encoded_size(t.frame.size() + 1);
  CHECK(absl::IsInvalidArgument(Check(first, t, "b")));
  t = TiedView(1, 0, 4);
  t.first.set_tensor_id(1);
  CHECK(absl::IsInvalidArgument(Check(first, t, "b")));
  t = TiedView(1, 0, 4);
  t.first.set_microbatch(3);
  s = Check(first, t, "b");
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "microbatch 3"));
  // The whole view: a flipped byte; one that names another round than its key.
  t = TiedView(1, 0, 4);
  t.frame[12] ^= 1;
  CHECK(absl::IsDataLoss(first.CheckWhole(t.first, t.frame, "b")));
  t = TiedView(1, 0, 4);
  t.first.set_step(9);
  CHECK(Check(first, t, "b").ok());
  s = first.CheckWhole(t.first, t.frame, "b");
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "after step 5"));
  // The frames the first stage took: to the last only, each checked for the tied slice.
  const Tensor frames = TiedFrames(0, 1, 4, spec, links);
  CHECK(Check(last, frames, "a").ok());
  CHECK(last.CheckWhole(frames.first, frames.frame, "a").ok());
  CHECK(absl::IsInvalidArgument(Check(first, TiedFrames(1, 0, 4, spec, links), "b")));
  t = frames;
  t.first.set_encoded_size(100000000);
  s = Check(last, t, "a");
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "more than a round's can take"));
  t = frames;
  t.frame[40] ^= 1;  // inside the frame, its container's checksum made to match
  t.frame.resize(t.frame.size() - 8);
  const uint64_t sum = XXH64(t.frame.data(), t.frame.size(), 0);
  for (int i = 0; i < 8; ++i) t.frame.push_back(static_cast<uint8_t>(sum >> (8 * i)));
  s = last.CheckWhole(t.first, t.frame, "a");
  CHECK_FALSE(s.ok());
  CHECK(Names(s, "replica 1's frame"));
  // The first stage's copy of the tied embedding, to the last only, after a round, in its shape.
  const Tensor values = Make(v1::TENSOR_KIND_TIED_ROUND, 0, 1, {Vp, C}, 4, kTiedValues);
  CHECK(Check(last, values, "a").ok());
  CHECK(last.CheckWhole(values.first, values.frame, "a").ok());
  CHECK(absl::IsInvalidArgument(
      Check(first, Make(v1::TENSOR_KIND_TIED_ROUND, 1, 0, {Vp, C}, 4, kTiedValues), "b")));
  CHECK(absl::IsInvalidArgument(
      Check(last, Make(v1::TENSOR_KIND_TIED_ROUND, 0, 1, {Vp, C}, 3, kTiedValues), "a")));
  CHECK(absl::IsInvalidArgument(
      Check(last, Make(v1::TENSOR_KIND_TIED_ROUND, 0, 1, {Vp, C / 2}, 4, kTiedValues), "a")));
}

TEST_CASE("a stage admits sync frames only from the replica stages its routes name",
          "[admission]") {
  const JobSpec spec = Spec();
  const v1::StageAssignment a = Assignment(1);
  const StageAdmission admission("b", a, spec);
  const std::vector<SyncRoute> routes = StageOneRoutes(spec, a);
  const fleet::SyncSlice slice = routes.front().slice;
  const uint64_t sync_step = kEvery - 1;  // local mode syncs after every 5th step
  auto sync = [&](int from, uint64_t step, uint32_t microbatch, int64_t size, uint32_t attempt = 3,
                  uint32_t id = 0xffffffff) {
    return Make(v1::TENSOR_KIND_SYNC, from, 1, {size}, step, microbatch,
                id == 0xffffffff ? static_cast<uint32_t>(slice.index) : id, attempt);
  };

  CHECK(Check(admission, sync(3, sync_step, 1, slice.size), "d").ok());
  // Every slice the stage holds, in its exact size.
  for (const SyncRoute& r : routes) {
    CHECK(Check(admission,
                sync(3, sync_step, 1, r.slice.size, 3, static_cast<uint32_t>(r.slice.index)), "d")
              .ok());
  }

  SECTION("not a stage of another replica holding the slice") {
    // Stage 2 is replica 1's too, but holds layers 0-2.
    CHECK(absl::IsPermissionDenied(Check(admission, sync(2, sync_step, 1, slice.size), "c")));
    // Its own replica's stage.
    CHECK(absl::IsPermissionDenied(Check(admission, sync(0, sync_step, 0, slice.size), "a")));
    // The right stage claimed by another site.
    CHECK(absl::IsPermissionDenied(Check(admission, sync(3, sync_step, 1, slice.size), "c")));
  }
  SECTION("a step at which the slice does not sync, another replica's frame, a wrong size") {
    Status s = Check(admission, sync(3, 0, 1, slice.size), "d");
    CHECK(absl::IsInvalidArgument(s));
    CHECK(Names(s, "does not sync"));
    CHECK(absl::IsInvalidArgument(Check(admission, sync(3, sync_step, 0, slice.size), "d")));
    CHECK(absl::IsInvalidArgument(Check(admission, sync(3, sync_step, 1, slice.size + 1), "d")));
    // A slice index this stage does not hold.
    CHECK(absl::IsInvalidArgument(
        Check(admission, sync(3, sync_step, 1, slice.size, 3, 100000), "d")));
  }
  SECTION("another attempt's frame") {
    // A later attempt: not assigned here yet, the sender retries.
    CHECK(absl::IsUnavailable(Check(admission, sync(3, sync_step, 1, slice.size, 4), "d")));
    CHECK(absl::IsFailedPrecondition(Check(admission, sync(3, sync_step, 1, slice.size, 2), "d")));
  }
  SECTION("a dropped replica's stage sits the attempt out") {
    const StageAdmission without("b", Assignment(1, {1}), spec);
    Status s = Check(without, sync(3, sync_step, 1, slice.size), "d");
    CHECK(absl::IsPermissionDenied(s));
    CHECK(Names(s, "dropped"));
  }
  SECTION("a replica removed mid-attempt: its frames refused, the admission otherwise alike") {
    auto removed = admission.WithRemoved(std::vector<uint32_t>{1});
    REQUIRE(removed.ok());
    Status s = Check(**removed, sync(3, sync_step, 1, slice.size), "d");
    CHECK(absl::IsPermissionDenied(s));
    CHECK(Names(s, "replica 1 (removed from the job)"));
    // Its own replica's pipeline neighbour is still admitted, and the original is unchanged.
    CHECK(Check(**removed, Make(v1::TENSOR_KIND_ACTIVATION, 0, 1, {2, 32, 32}), "a").ok());
    CHECK(Check(admission, sync(3, sync_step, 1, slice.size), "d").ok());
    // A replica outside the plan, or the stage's own, is no removal it takes.
    CHECK(absl::IsInvalidArgument(admission.WithRemoved(std::vector<uint32_t>{2}).status()));
    CHECK(absl::IsInvalidArgument(admission.WithRemoved(std::vector<uint32_t>{0}).status()));
  }
  SECTION("a replica removed as of a step: its frames of earlier steps still count") {
    // A gather or ring job's removal (JobCommand.from_step): the sync of that step and every
    // later one leave it out; one before it still waits for its frames.
    auto later = admission.WithRemoved(std::vector<uint32_t>{1}, sync_step + 1);
    REQUIRE(later.ok());
    CHECK(Check(**later, sync(3, sync_step, 1, slice.size), "d").ok());
    auto at = admission.WithRemoved(std::vector<uint32_t>{1}, sync_step);
    REQUIRE(at.ok());
    Status s = Check(**at, sync(3, sync_step, 1, slice.size), "d");
    CHECK(absl::IsPermissionDenied(s));
    CHECK(Names(s, "replica 1 (removed from the job)"));
    // Removed twice: the earlier step stands.
    auto again = (*at)->WithRemoved(std::vector<uint32_t>{1}, sync_step + 1);
    REQUIRE(again.ok());
    CHECK(absl::IsPermissionDenied(Check(**again, sync(3, sync_step, 1, slice.size), "d")));
  }
}

TEST_CASE("a gossip job over compressed links admits its peers' link frames, bounded and whole",
          "[admission]") {
  // Replica 1's stage 3 (site d) sends stage 1 (b) its q4 difference of each slice they share
  // (two replicas: each is the other's one out-neighbour every round).
  JobSpec spec = Spec();
  spec.sync.reduce = fleet::SyncReduce::kGossip;
  spec.sync.codec = "q4";
  REQUIRE(fleet::GossipSendsLinks(spec.sync));
  const v1::StageAssignment a = Assignment(1);
  const StageAdmission admission("b", a, spec);
  // Not the tied embedding: stage 1, replica 0's last stage, takes that from its own first
  // (tied_round.h), and refuses it from another replica.
  const std::vector<SyncRoute> routes = StageOneRoutes(spec, a);
  const int wte = model::ParameterLayout(spec.job.model).SliceIndex(model::Tensor::kWte, 0);
  REQUIRE(routes.front().slice.index == wte);
  const fleet::SyncSlice slice = routes.back().slice;
  const fleet::SyncSlice local{slice.index, 0, slice.size};
  auto node =
      fleet::LinkGossipNode::Create(1, 2, {local}, static_cast<size_t>(slice.size), "q4", false);
  REQUIRE(node.ok());
  std::vector<float> x(static_cast<size_t>(slice.size), 0.25f);
  (*node)->Reset(x);
  x[3] = 0.5f;
  auto frame = (*node)->Frame(0, 0, 0, x);
  REQUIRE(frame.ok());
  Tensor t;
  t.frame = *frame;
  t.first.set_job_id("j-000001");
  t.first.set_attempt(3);
  t.first.set_step(kEvery - 1);
  t.first.set_microbatch(1);  // the sender's replica: a round's frame
  t.first.set_kind(v1::TENSOR_KIND_SYNC);
  t.first.set_tensor_id(static_cast<uint32_t>(slice.index));
  t.first.set_from_stage(3);
  t.first.set_to_stage(1);
  t.first.set_encoded_size(t.frame.size());
  CHECK(Check(admission, t, "d").ok());
  CHECK(admission.CheckWhole(t.first, t.frame, "d").ok());
  Tensor tied = t;
  tied.first.set_tensor_id(static_cast<uint32_t>(wte));
  const Status refused = Check(admission, tied, "d");
  CHECK(absl::IsPermissionDenied(refused));
  CHECK(Names(refused, "takes them from its first"));
  // Announced larger than the slice's key frame can be: refused before it is buffered.
  Tensor big = t;
  big.first.set_encoded_size(uint64_t{1} << 30);
  Status st = Check(admission, big, "d");
  CHECK(absl::IsInvalidArgument(st));
  CHECK(Names(st, "more than the slice's largest"));
  // An fp32 gossip frame in a q4 links job: larger than any link frame of the slice, and with
  // another magic.
  std::vector<uint32_t> all(static_cast<size_t>(slice.size));
  for (size_t c = 0; c < all.size(); ++c) all[c] = static_cast<uint32_t>(c);
  const std::vector<float> ones(all.size(), 1.0f);
  Tensor fp32 = t;
  fp32.frame = fleet::EncodeGossipFrame(static_cast<uint32_t>(slice.index), all, x, ones);
  fp32.first.set_encoded_size(fp32.frame.size());
  st = Check(admission, fp32, "d");
  CHECK(absl::IsInvalidArgument(st));
  CHECK(Names(st, "more than the slice's largest"));
  Tensor magic = t;
  std::copy_n("LHGS", 4, magic.frame.begin());
  st = Check(admission, magic, "d");
  CHECK(absl::IsInvalidArgument(st));
  CHECK(Names(st, "not a version-1 gossip link frame"));
  // The whole frame: a flipped byte in its difference.
  Tensor flipped = t;
  flipped.frame[flipped.frame.size() - 20] ^= 1;
  st = admission.CheckWhole(flipped.first, flipped.frame, "d");
  CHECK(absl::IsInvalidArgument(st));
  CHECK(Names(st, "checksum"));
  // The final average's frames stay fp32 gossip frames of every coordinate.
  Tensor final_avg = fp32;
  final_avg.first.set_step(kSteps - 1);
  final_avg.first.set_microbatch(2 + 1);  // GossipFinalTag(2) + the sender's replica
  CHECK(Check(admission, final_avg, "d").ok());
  CHECK(admission.CheckWhole(final_avg.first, final_avg.frame, "d").ok());
  // A link matrix the coordinator sent while the attempt ran (epoch 1, from round 1: the sync
  // after step 9): a round's frame names the epoch its graph was drawn from. One naming an
  // epoch this site has not been told of waits (the sender retries); one naming another
  // epoch than its round's is refused.
  Tensor second = t;  // round 1's frame
  second.first.set_step(2 * kEvery - 1);
  second.first.set_links_epoch(1);
  st = Check(admission, second, "d");
  CHECK(absl::IsUnavailable(st));
  CHECK(Names(st, "has not been told of yet"));
  auto told = admission.WithGossipLinks(1, 1, {0, 1e6, 2e6, 0});
  REQUIRE(told.ok());
  CHECK(Check(**told, second, "d").ok());
  second.first.set_links_epoch(0);
  st = Check(**told, second, "d");
  CHECK(absl::IsInvalidArgument(st));
  CHECK(Names(st, "its round draws from epoch 1 (from round 1)"));
  CHECK(Check(**told, t, "d").ok());  // round 0: the assignment's, epoch 0
  Tensor early = t;
  early.first.set_links_epoch(1);
  CHECK(absl::IsInvalidArgument(Check(**told, early, "d")));
  // The same epoch told again changes nothing; one out of order is refused.
  CHECK((*told)->WithGossipLinks(1, 1, {0, 1e6, 2e6, 0}).ok());
  CHECK_FALSE((*told)->WithGossipLinks(1, 0, {0, 1e6, 2e6, 0}).ok());
  CHECK_FALSE((*told)->WithGossipLinks(3, 5, {0, 1e6, 2e6, 0}).ok());
  CHECK_FALSE(admission.WithGossipLinks(0, 1, {}).ok());
}

}  // namespace
}  // namespace longhaul::daemon
