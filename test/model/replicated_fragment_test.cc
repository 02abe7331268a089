// Data parallelism inside a site (model/replicated_fragment.h): one replica is the plain
// fragment bit for bit; several replicas (rows split, gradients summed by the host reducer)
// train a two-stage pipeline to the same losses and parameters within float rounding, and
// their forward activations are the single fragment's exactly (rows are independent).
//
// Built a second time as replicated_fragment_test_cuda (tag gpu, LONGHAUL_FRAGMENT_TEST_CUDA):
// the same cases with every replica a "cuda:0" backend (one GPU: the host reducer between
// them, as between any replicas that are not distinct GPUs), and the NCCL reducer's
// all-gather and reduce-scatter at world size 1.
#include "model/replicated_fragment.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <deque>
#include <vector>

#include "kernels/ops.h"
#include "kernels/replica_reducer.h"
#ifdef LONGHAUL_FRAGMENT_TEST_CUDA
#include "kernels/cuda_backend.h"
#include "kernels/cuda_backend_entry.h"
#endif

namespace longhaul::model {
namespace {

constexpr int kB = 4, kT = 8, kM = 2;  // microbatch rows, sequence length, microbatches

#ifdef LONGHAUL_FRAGMENT_TEST_CUDA
constexpr const char* kBackend = "cuda:0";
constexpr double kSumsEpsilon = 1e-4;  // a slice's sum of squares, summed on the GPU
#else
constexpr const char* kBackend = "cpu-ref";
constexpr double kSumsEpsilon = 1e-5;
#endif

std::vector<int32_t> Tokens(int seed) {
  std::vector<int32_t> t(kB * kT);
  for (int i = 0; i < kB * kT; ++i) t[i] = (i * 7 + seed * 13) % 67;
  return t;
}

// `n` backends (cpu-ref, or cuda:0 in the twin), one a replica (a site's devices).
struct Devices {
  explicit Devices(int n) {
    for (int i = 0; i < n; ++i) {
      owned.push_back(*kernels::MakeOps(kBackend, 1));
      ops.push_back(owned.back().get());
    }
  }
  std::vector<std::unique_ptr<kernels::Ops>> owned;
  std::vector<kernels::Ops*> ops;
};

// A two-stage pipeline, each stage replicated `replicas` times, trained for
// `steps` steps of kM microbatches; returns the losses and both stages' final parameters.
struct Run {
  std::vector<float> losses, first_params, last_params, first_output;
  std::vector<float> first_m, first_v;  // the first stage's AdamW moments at the end
  int64_t first_optimizer_bytes = 0;    // replica 0's, as EstimateMemory gives it
  std::vector<float> first_grads;       // the first stage's last gradient
  std::vector<double> first_grad_sums;  // and its slices' sums of squares
};

// `modes`: the two layers' sharding (model/shard_mode.h), one a stage; empty: as `shard` says.
// A llama of the same size (grouped-query attention, SwiGLU, no biases; tied head).
ModelConfig Llama() {
  ModelConfig c = MakeConfig(2, 32, 4, 67, 16);
  c.family = Family::kLlama;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 48;
  c.tied_embeddings = true;
  return c;
}

Run Train(int replicas, int steps, bool shard = false, std::vector<ShardMode> modes = {},
          int microbatches = kM, bool llama = false) {
  const ModelConfig c = llama ? Llama() : MakeConfig(2, 32, 4, 67, 16);
  Devices a(replicas), b(replicas);
  FragmentOptions fa{.begin = 0, .end = 1, .batch_size = kB, .seq_len = kT, .slots = 1};
  FragmentOptions fb{.begin = 1, .end = 2, .batch_size = kB, .seq_len = kT, .slots = 1};
  fa.shard_optimizer = fb.shard_optimizer = shard;
  if (!modes.empty()) {
    fa.layer_modes = {modes[0]};
    fb.layer_modes = {modes[1]};
  }
  auto first = ReplicatedFragment::Create(c, fa, a.ops);
  auto last = ReplicatedFragment::Create(c, fb, b.ops);
  REQUIRE(first.ok());
  REQUIRE(last.ok());
  (*first)->InitParameters(5);
  (*last)->InitParameters(5);
  OptimizerOptions opt;
  opt.weight_decay = 0.1f;
  const size_t act = static_cast<size_t>(kB) * kT * c.channels;
  const size_t wte = static_cast<size_t>(c.padded_vocab_size) * c.channels;
  std::vector<float> h(act), g(act), tied_a(wte), tied_b(wte);
  Run run;
  for (int step = 0; step < steps; ++step) {
    (*first)->ZeroGrads();
    (*last)->ZeroGrads();
    double loss = 0;
    for (int mb = 0; mb < microbatches; ++mb) {
      const auto in = Tokens(step * kM + mb), tg = Tokens(step * kM + mb + 1);
      REQUIRE((*first)->Forward(0, in.data(), nullptr).ok());
      (*first)->Output(0, h.data());
      if (step == 0 && mb == 0) run.first_output = h;
      REQUIRE((*last)->Forward(0, nullptr, h.data()).ok());
      auto l = (*last)->Loss(0, tg.data());
      REQUIRE(l.ok());
      loss += *l;
      REQUIRE((*last)->Backward(0, nullptr, 1.0f / (kB * kT * microbatches)).ok());
      (*last)->InputGrad(g.data());
      REQUIRE((*first)->Backward(0, g.data(), 0).ok());
    }
    run.losses.push_back(static_cast<float>(loss / microbatches));
    REQUIRE((*first)->ReduceGradients().ok());
    REQUIRE((*last)->ReduceGradients().ok());
    (*first)->TiedGradOwn(tied_a.data());
    (*last)->TiedGradOwn(tied_b.data());
    (*first)->SetTiedGradPeer(tied_b.data());
    (*last)->SetTiedGradPeer(tied_a.data());
    (*first)->CombineTiedGrads();
    (*last)->CombineTiedGrads();
    REQUIRE((*first)->Step(opt, 1e-2f, 1.0f, step + 1).ok());
    REQUIRE((*last)->Step(opt, 1e-2f, 1.0f, step + 1).ok());
  }
  run.first_params.resize((*first)->layout().total());
  run.last_params.resize((*last)->layout().total());
  (*first)->GetParameters(run.first_params.data());
  (*last)->GetParameters(run.last_params.data());
  run.first_m.resize(run.first_params.size());
  run.first_v.resize(run.first_params.size());
  (*first)->GetOptimizerState(run.first_m.data(), run.first_v.data());
  run.first_optimizer_bytes = ReplicatedFragment::EstimateMemory(c, fa, replicas)[0].optimizer;
  run.first_grads.resize(run.first_params.size());
  (*first)->GetGradients(run.first_grads.data());
  run.first_grad_sums = (*first)->GradSliceSums();
  return run;
}

// The same pipeline on plain fragments, the way the stage runner drove them before.
Run TrainPlain(int steps) {
  const ModelConfig c = MakeConfig(2, 32, 4, 67, 16);
  auto ops = *kernels::MakeOps(kBackend, 1);
  FragmentOptions fa{.begin = 0, .end = 1, .batch_size = kB, .seq_len = kT, .slots = 1};
  FragmentOptions fb{.begin = 1, .end = 2, .batch_size = kB, .seq_len = kT, .slots = 1};
  auto first = *Fragment::Create(c, fa, ops.get());
  auto last = *Fragment::Create(c, fb, ops.get());
  first->InitParameters(5);
  last->InitParameters(5);
  OptimizerOptions opt;
  opt.weight_decay = 0.1f;
  const size_t wte = static_cast<size_t>(c.padded_vocab_size) * c.channels;
  std::vector<float> tied_a(wte), tied_b(wte);
  Run run;
  for (int step = 0; step < steps; ++step) {
    first->ZeroGrads();
    last->ZeroGrads();
    double loss = 0;
    for (int mb = 0; mb < kM; ++mb) {
      const auto in = Tokens(step * kM + mb), tg = Tokens(step * kM + mb + 1);
      REQUIRE(first->Forward(0, in.data(), nullptr).ok());
      REQUIRE(last->Forward(0, nullptr, first->Output(0)).ok());
      loss += *last->Loss(0, tg.data());
      REQUIRE(last->Backward(0, nullptr, 1.0f / (kB * kT * kM)).ok());
      REQUIRE(first->Backward(0, last->InputGrad(), 0).ok());
    }
    run.losses.push_back(static_cast<float>(loss / kM));
    ops->Download(tied_a.data(), first->TiedGradOwn(), wte);
    ops->Download(tied_b.data(), last->TiedGradOwn(), wte);
    ops->Upload(first->TiedGradPeer(), tied_b.data(), wte);
    ops->Upload(last->TiedGradPeer(), tied_a.data(), wte);
    first->CombineTiedGrads();
    last->CombineTiedGrads();
    first->Step(opt, 1e-2f, 1.0f, step + 1);
    last->Step(opt, 1e-2f, 1.0f, step + 1);
  }
  run.first_params.resize(first->layout().total());
  run.last_params.resize(last->layout().total());
  first->GetParameters(run.first_params.data());
  last->GetParameters(run.last_params.data());
  return run;
}

// max |a - b|; NaN when either holds a NaN (std::max(m, NaN) would be m), so that a NaN fails
// every tolerance.
float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    m = std::isnan(d) ? d : std::max(m, d);  // once NaN, std::max(m, d) keeps it
  }
  return m;
}

// `a` and `b` bit for bit. In the GPU twin within `tolerance` (max |a - b|), printing which
// held: the replicas' matrix products may take other cuBLAS algorithms there (other rows a
// replica, zero3's working buffers at other alignments).
bool Same(const std::vector<float>& a, const std::vector<float>& b, const char* what,
          float tolerance = 2e-4f) {
#ifdef LONGHAUL_FRAGMENT_TEST_CUDA
  const float d = MaxAbsDiff(a, b);
  std::printf("%s: %s (max |diff| %g)\n", what, a == b ? "bit for bit" : "within rounding", d);
  return d <= tolerance;
#else
  (void)what;
  (void)tolerance;
  return a == b;
#endif
}

TEST_CASE("one replica is the plain fragment, bit for bit") {
  const Run plain = TrainPlain(4), one = Train(1, 4);
  CHECK(Same(one.losses, plain.losses, "one replica: losses", 1e-4f));
  CHECK(Same(one.first_params, plain.first_params, "one replica: first stage"));
  CHECK(Same(one.last_params, plain.last_params, "one replica: last stage"));
}

TEST_CASE("two and three replicas train to the same losses and parameters") {
  const Run one = Train(1, 5);
  for (int replicas : {2, 3}) {  // 3: rows 2, 1, 1
    INFO(replicas << " replicas");
    const Run many = Train(replicas, 5);
    // Rows are independent in the forward pass.
    CHECK(Same(many.first_output, one.first_output, "first stage's output", 1e-5f));
    for (size_t i = 0; i < one.losses.size(); ++i) {
      INFO("step " << i + 1 << ": " << many.losses[i] << " vs " << one.losses[i]);
      CHECK(std::fabs(many.losses[i] - one.losses[i]) <= 1e-5f * std::fabs(one.losses[i]));
    }
    // AdamW normalises each update, so float-rounding differences in small gradients show up
    // at a fraction of the learning rate (1e-2); a wrong reduction would differ by about lr.
    CHECK(MaxAbsDiff(many.first_params, one.first_params) < 2e-4f);
    CHECK(MaxAbsDiff(many.last_params, one.last_params) < 2e-4f);
  }
}

TEST_CASE("AdamW state sharded over the replicas (ZeRO-1) is the replicated step bit for bit") {
  for (int replicas : {2, 3}) {
    INFO(replicas << " replicas");
    const Run replicated = Train(replicas, 5), sharded = Train(replicas, 5, /*shard=*/true);
    CHECK(Same(sharded.losses, replicated.losses, "zero1: losses", 1e-4f));
    CHECK(Same(sharded.first_params, replicated.first_params, "zero1: first stage"));
    CHECK(Same(sharded.last_params, replicated.last_params, "zero1: last stage"));
    // The moments gathered from the parts are the replicated ones (checkpoints unchanged).
    CHECK(Same(sharded.first_m, replicated.first_m, "zero1: first moments"));
    CHECK(Same(sharded.first_v, replicated.first_v, "zero1: second moments", 1e-6f));
    CHECK(MaxAbsDiff(sharded.first_m, std::vector<float>(sharded.first_m.size(), 0.0f)) > 0);
    // Each replica holds 1/R of the optimizer state.
    CHECK(sharded.first_optimizer_bytes * replicas <= replicated.first_optimizer_bytes);
    CHECK(sharded.first_optimizer_bytes * replicas >
          replicated.first_optimizer_bytes - 8 * replicas);
  }
  // One replica: nothing to shard, the plain fragment.
  CHECK(Same(Train(1, 3, /*shard=*/true).losses, Train(1, 3).losses, "zero1, one replica"));
}

// The CUDA backend keeps no allocation count (peak_allocated_bytes() is -1): the CPU only.
#ifndef LONGHAUL_FRAGMENT_TEST_CUDA
TEST_CASE("each replica's memory, in every sharding mode, is the cost model's within 10%") {
  // A fragment whose AdamW state is most of it: a wide embedding, small activations.
  const ModelConfig c = MakeConfig(2, 128, 4, 4000, 16);
  for (int replicas : {1, 2, 4}) {
    for (int k = 0; k < kNumShardModes; ++k) {
      const ShardMode mode = ShardMode(k);
      INFO(replicas << " replicas, layers " << ShardModeName(mode));
      Devices devices(replicas);
      FragmentOptions o{.begin = 0, .end = 2, .batch_size = 4, .seq_len = 16, .slots = 2};
      o.layer_modes = {mode, mode};
      auto f = ReplicatedFragment::Create(c, o, devices.ops);
      REQUIRE(f.ok());
      const std::vector<MemoryReport> predicted =
          ReplicatedFragment::EstimateMemory(c, o, replicas);
      for (int i = 0; i < replicas; ++i) {
        const int64_t want = predicted[static_cast<size_t>(i)].total();
        const int64_t measured = devices.ops[static_cast<size_t>(i)]->peak_allocated_bytes();
        INFO("replica " << i << ": measured " << measured << " bytes, predicted " << want);
        CHECK(measured > 0);
        CHECK(std::fabs(static_cast<double>(measured - want)) <= 0.10 * want);
      }
    }
  }
}
#endif

TEST_CASE("zero2 and zero3 layers: the replicated step, bit for bit with one microbatch a step") {
  const std::vector<std::vector<ShardMode>> cases = {{ShardMode::kZero2, ShardMode::kZero2},
                                                     {ShardMode::kZero3, ShardMode::kZero3},
                                                     {ShardMode::kZero3, ShardMode::kZero2},
                                                     {ShardMode::kReplicate, ShardMode::kZero3}};
  for (int replicas : {2, 3}) {
    const Run replicated1 = Train(replicas, 4, false, {}, 1);
    const Run replicated2 = Train(replicas, 4, false, {}, 2);
    for (const auto& modes : cases) {
      INFO(replicas << " replicas, layers " << ShardModeName(modes[0]) << " and "
                    << ShardModeName(modes[1]));
      // One microbatch: each part of the gradient is the same sum in the same order.
      const Run one = Train(replicas, 4, false, modes, 1);
      CHECK(Same(one.losses, replicated1.losses, "sharded layers: losses", 1e-4f));
      CHECK(Same(one.first_params, replicated1.first_params, "sharded layers: first stage"));
      CHECK(Same(one.last_params, replicated1.last_params, "sharded layers: last stage"));
      CHECK(Same(one.first_m, replicated1.first_m, "sharded layers: first moments"));
      CHECK(Same(one.first_v, replicated1.first_v, "sharded layers: second moments", 1e-6f));
      CHECK(Same(one.first_grads, replicated1.first_grads, "sharded layers: gradients", 1e-5f));
      // A sharded slice's sum of squares adds its parts' sums: within rounding.
      for (size_t i = 0; i < one.first_grad_sums.size(); ++i) {
        INFO("slice " << i);
        CHECK(one.first_grad_sums[i] ==
              Approx(replicated1.first_grad_sums[i]).epsilon(kSumsEpsilon).margin(1e-12));
      }
      // Two microbatches: summed over the replicas each microbatch, within float rounding.
      const Run two = Train(replicas, 4, false, modes, 2);
      for (size_t i = 0; i < two.losses.size(); ++i) {
        INFO("step " << i + 1 << ": " << two.losses[i] << " vs " << replicated2.losses[i]);
        CHECK(std::fabs(two.losses[i] - replicated2.losses[i]) <=
              1e-5f * std::fabs(replicated2.losses[i]));
      }
      CHECK(MaxAbsDiff(two.first_params, replicated2.first_params) < 2e-4f);
      CHECK(MaxAbsDiff(two.last_params, replicated2.last_params) < 2e-4f);
    }
  }
}

TEST_CASE("a llama's zero2 and zero3 layers: the replicated step bit for bit, one microbatch") {
  REQUIRE(ValidateConfig(Llama()).ok());
  const Run replicated = Train(2, 3, false, {}, 1, /*llama=*/true);
  const Run sharded = Train(2, 3, false, {ShardMode::kZero3, ShardMode::kZero2}, 1, /*llama=*/true);
  CHECK(Same(sharded.losses, replicated.losses, "llama, sharded: losses", 1e-4f));
  CHECK(Same(sharded.first_params, replicated.first_params, "llama, sharded: first stage"));
  CHECK(Same(sharded.last_params, replicated.last_params, "llama, sharded: last stage"));
  CHECK(Same(sharded.first_m, replicated.first_m, "llama, sharded: first moments"));
  const Run two = Train(2, 3, false, {ShardMode::kZero3, ShardMode::kZero2}, 2, /*llama=*/true);
  const Run replicated2 = Train(2, 3, false, {}, 2, /*llama=*/true);
  for (size_t i = 0; i < two.losses.size(); ++i) {
    CHECK(std::fabs(two.losses[i] - replicated2.losses[i]) <=
          1e-5f * std::fabs(replicated2.losses[i]));
  }
}

TEST_CASE("a sharded stage's state moves to another device count and mode whole") {
  // Three steps with zero3 on three replicas; the parameters and moments carried to one or two
  // replicas, zero2 or replicated, read back the same, and the next steps' losses are the
  // uninterrupted run's within float rounding.
  const ModelConfig c = MakeConfig(2, 32, 4, 67, 16);
  std::deque<Devices> owned;  // outlives the fragments made on them
  auto make = [&](int replicas, std::vector<ShardMode> modes) {
    owned.emplace_back(replicas);
    FragmentOptions o{.begin = 0, .end = 2, .batch_size = kB, .seq_len = kT, .slots = 1};
    o.layer_modes = std::move(modes);
    auto f = ReplicatedFragment::Create(c, o, owned.back().ops);
    REQUIRE(f.ok());
    return std::move(*f);
  };
  OptimizerOptions opt;
  opt.weight_decay = 0.1f;
  auto step = [&](ReplicatedFragment& f, int t) {
    f.ZeroGrads();
    const auto in = Tokens(t), tg = Tokens(t + 1);
    REQUIRE(f.Forward(0, in.data(), nullptr).ok());
    auto loss = f.Loss(0, tg.data());
    REQUIRE(loss.ok());
    REQUIRE(f.Backward(0, nullptr, 1.0f / (kB * kT)).ok());
    REQUIRE(f.ReduceGradients().ok());
    f.CombineTiedGrads();
    REQUIRE(f.Step(opt, 1e-2f, 1.0f, t).ok());
    return *loss;
  };
  auto reference = make(1, {});
  auto sharded = make(3, {ShardMode::kZero3, ShardMode::kZero3});
  reference->InitParameters(9);
  sharded->InitParameters(9);
  for (int t = 1; t <= 3; ++t) {
    const float want = step(*reference, t);
    CHECK(std::fabs(step(*sharded, t) - want) <= 1e-5f * want);
  }
  const size_t n = static_cast<size_t>(sharded->layout().total());
  std::vector<float> p(n), m(n), v(n);
  sharded->GetParameters(p.data());
  sharded->GetOptimizerState(m.data(), v.data());
  const float want4 = step(*reference, 4), want5 = step(*reference, 5);
  for (const auto& modes : std::vector<std::vector<ShardMode>>{
           {ShardMode::kZero2, ShardMode::kZero1}, {ShardMode::kZero3, ShardMode::kZero2}, {}}) {
    for (int replicas : {1, 2}) {
      INFO(replicas << " replicas, " << (modes.empty() ? "replicated" : ShardModeName(modes[0])));
      auto moved = make(replicas, modes);
      moved->SetParameters(p.data());
      moved->SetOptimizerState(m.data(), v.data());
      std::vector<float> back(n), mb(n), vb(n);
      moved->GetParameters(back.data());
      moved->GetOptimizerState(mb.data(), vb.data());
      CHECK(back == p);
      CHECK(mb == m);
      CHECK(vb == v);
      CHECK(std::fabs(step(*moved, 4) - want4) <= 1e-5f * want4);
      CHECK(std::fabs(step(*moved, 5) - want5) <= 1e-5f * want5);
    }
  }
}

// The sharded gradients' reduce-scatter: each replica's part holds the sum over the replicas
// in replica order; bad parts are refused as the all-gather refuses them.
TEST_CASE("the host reducer's reduce-scatter sums each part into its owner") {
  Devices devices(3);
  const std::vector<kernels::Ops*>& ops = devices.ops;
  auto reducer = kernels::MakeReplicaReducer(ops);
  REQUIRE(reducer.ok());
  constexpr size_t kN = 10;
  const std::vector<size_t> offsets = {0, 3, 3, kN};  // replica 1's part is empty
  std::vector<float*> buffers;
  for (int i = 0; i < 3; ++i) {
    buffers.push_back(ops[i]->Alloc(kN));
    std::vector<float> mine(kN);
    for (size_t k = 0; k < kN; ++k) mine[k] = 0.1f * (i + 1) + static_cast<float>(k);
    ops[i]->Upload(buffers[i], mine.data(), kN);
  }
  REQUIRE((*reducer)->ReduceScatterSum(buffers, offsets).ok());
  for (int i : {0, 2}) {
    std::vector<float> got(kN);
    ops[i]->Download(got.data(), buffers[i], kN);
    for (size_t k = offsets[i]; k < offsets[i + 1]; ++k) {
      INFO("replica " << i << " float " << k);
      float want = 0.0f;
      for (int r = 0; r < 3; ++r) want += 0.1f * (r + 1) + static_cast<float>(k);
      CHECK(got[k] == want);
    }
  }
  const std::vector<size_t> backwards = {0, 6, 4, kN};
  Status s = (*reducer)->ReduceScatterSum(buffers, backwards);
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("part 1 ends before it begins"));
  for (int i = 0; i < 3; ++i) ops[i]->Free(buffers[i]);
}

TEST_CASE("more replicas than sequences is refused, saying why") {
  const ModelConfig c = MakeConfig(2, 32, 4, 67, 16);
  Devices devices(3);
  FragmentOptions o{.begin = 0, .end = 2, .batch_size = 2, .seq_len = kT, .slots = 1};
  auto f = ReplicatedFragment::Create(c, o, devices.ops);
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(std::string(f.status().message()), Catch::Contains("3 replicas"));
  CHECK_THAT(std::string(f.status().message()), Catch::Contains("microbatch of 2"));
}

// The sharded step's gather (kernels/replica_reducer.h): each replica's own part reaches every
// other replica, nothing else is written; parts may be empty; bad parts are refused, naming why.
TEST_CASE("the host reducer's all-gather copies each replica's part to the others") {
  Devices devices(3);
  const std::vector<kernels::Ops*>& ops = devices.ops;
  auto reducer = kernels::MakeReplicaReducer(ops);
  REQUIRE(reducer.ok());
  constexpr size_t kN = 10;
  const std::vector<size_t> offsets = {0, 4, 4, kN};  // replica 1's part is empty
  std::vector<float*> buffers;
  for (int i = 0; i < 3; ++i) {
    buffers.push_back(ops[i]->Alloc(kN));
    std::vector<float> mine(kN);
    for (size_t k = 0; k < kN; ++k) mine[k] = 100.0f * i + k;
    ops[i]->Upload(buffers[i], mine.data(), kN);
  }
  REQUIRE((*reducer)->AllGather(buffers, offsets).ok());
  for (int i = 0; i < 3; ++i) {
    std::vector<float> got(kN);
    ops[i]->Download(got.data(), buffers[i], kN);
    for (size_t k = 0; k < kN; ++k) {
      const int owner = k < 4 ? 0 : 2;
      INFO("replica " << i << " float " << k);
      CHECK(got[k] == 100.0f * owner + k);
    }
  }
  const std::vector<size_t> short_offsets = {0, 4, kN};
  Status s = (*reducer)->AllGather(buffers, short_offsets);
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("3 offsets for 3 replicas"));
  const std::vector<size_t> backwards = {0, 6, 4, kN};
  s = (*reducer)->AllGather(buffers, backwards);
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("part 1 ends before it begins"));
  for (int i = 0; i < 3; ++i) ops[i]->Free(buffers[i]);
}

#ifdef LONGHAUL_FRAGMENT_TEST_CUDA
// The NCCL reducer (kernels/cuda/nccl_reducer.cc), reached through the backend's entry table as
// MakeReplicaReducer reaches it, over one GPU: a communicator of one rank, whose part is the
// whole, so every collective must leave the buffer as it was. (NcclComm's per-owner path for
// unequal parts: nccl_comm_test.)
TEST_CASE("the NCCL reducer's all-reduce, all-gather and reduce-scatter at world size 1") {
  Devices devices(1);
  const kernels::CudaBackendEntry* cuda = kernels::CudaBackendIfLoaded();
  REQUIRE(cuda != nullptr);
  auto reducer = cuda->new_nccl_reducer(devices.ops);
  REQUIRE(reducer.ok());
  REQUIRE(*reducer != nullptr);
  CHECK((*reducer)->name() == "nccl");
  constexpr size_t kN = 1000;
  kernels::Ops& ops = *devices.ops[0];
  float* buffer = ops.Alloc(kN);
  std::vector<float> mine(kN), got(kN);
  for (size_t k = 0; k < kN; ++k) mine[k] = 0.5f * static_cast<float>(k) - 3.0f;
  ops.Upload(buffer, mine.data(), kN);
  const std::vector<float*> buffers = {buffer};
  const std::vector<size_t> offsets = {7, 907};
  REQUIRE((*reducer)->AllGather(buffers, offsets).ok());
  ops.Download(got.data(), buffer, kN);
  CHECK(got == mine);
  REQUIRE((*reducer)->ReduceScatterSum(buffers, offsets).ok());
  ops.Download(got.data(), buffer, kN);
  CHECK(std::vector<float>(got.begin() + 7, got.begin() + 907) ==
        std::vector<float>(mine.begin() + 7, mine.begin() + 907));
  REQUIRE((*reducer)->AllReduceSum(buffers, kN).ok());
  ops.Download(got.data(), buffer, kN);
  CHECK(std::vector<float>(got.begin() + 7, got.begin() + 907) ==
        std::vector<float>(mine.begin() + 7, mine.begin() + 907));
  const std::vector<size_t> backwards = {9, 8};
  Status s = (*reducer)->AllGather(buffers, backwards);
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("part 0 ends (8) before it begins (9)"));
  s = (*reducer)->ReduceScatterSum(buffers, std::vector<size_t>{0, 1, 2});
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("3 offsets for 1 ranks"));
  ops.Free(buffer);
}
#endif

}  // namespace
}  // namespace longhaul::model
