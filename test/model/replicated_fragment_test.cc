// Data parallelism inside a site (model/replicated_fragment.h): one replica is the plain
// fragment bit for bit; several replicas (rows split, gradients summed by the host reducer)
// train a two-stage pipeline to the same losses and parameters within float rounding, and
// their forward activations are the single fragment's exactly (rows are independent).
#include "model/replicated_fragment.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "kernels/replica_reducer.h"

namespace longhaul::model {
namespace {

constexpr int kB = 4, kT = 8, kM = 2;  // microbatch rows, sequence length, microbatches

std::vector<int32_t> Tokens(int seed) {
  std::vector<int32_t> t(kB * kT);
  for (int i = 0; i < kB * kT; ++i) t[i] = (i * 7 + seed * 13) % 67;
  return t;
}

// A two-stage pipeline, each stage replicated `replicas` times on cpu-ref, trained for
// `steps` steps of kM microbatches; returns the losses and both stages' final parameters.
struct Run {
  std::vector<float> losses, first_params, last_params, first_output;
  std::vector<float> first_m, first_v;  // the first stage's AdamW moments at the end
  int64_t first_optimizer_bytes = 0;    // per replica, as Fragment::EstimateMemory gives it
};

Run Train(int replicas, int steps, bool shard = false) {
  const ModelConfig c = MakeConfig(2, 32, 4, 67, 16);
  std::vector<std::unique_ptr<kernels::Ops>> owned;
  std::vector<kernels::Ops*> a, b;
  for (int i = 0; i < replicas; ++i) {
    owned.push_back(*kernels::MakeOps("cpu-ref", 1));
    a.push_back(owned.back().get());
    owned.push_back(*kernels::MakeOps("cpu-ref", 1));
    b.push_back(owned.back().get());
  }
  FragmentOptions fa{.begin = 0, .end = 1, .batch_size = kB, .seq_len = kT, .slots = 1};
  FragmentOptions fb{.begin = 1, .end = 2, .batch_size = kB, .seq_len = kT, .slots = 1};
  fa.shard_optimizer = fb.shard_optimizer = shard;
  auto first = ReplicatedFragment::Create(c, fa, a);
  auto last = ReplicatedFragment::Create(c, fb, b);
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
    for (int mb = 0; mb < kM; ++mb) {
      const auto in = Tokens(step * kM + mb), tg = Tokens(step * kM + mb + 1);
      REQUIRE((*first)->Forward(0, in.data(), nullptr).ok());
      (*first)->Output(0, h.data());
      if (step == 0 && mb == 0) run.first_output = h;
      REQUIRE((*last)->Forward(0, nullptr, h.data()).ok());
      auto l = (*last)->Loss(0, tg.data());
      REQUIRE(l.ok());
      loss += *l;
      REQUIRE((*last)->Backward(0, nullptr, 1.0f / (kB * kT * kM)).ok());
      (*last)->InputGrad(g.data());
      REQUIRE((*first)->Backward(0, g.data(), 0).ok());
    }
    run.losses.push_back(static_cast<float>(loss / kM));
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
  FragmentOptions part = fa;
  if (shard && replicas > 1) {  // replica 0's part, as Create gives it
    part.optimizer_end = (*first)->layout().total() / replicas;
  }
  run.first_optimizer_bytes = Fragment::EstimateMemory(c, part).optimizer;
  return run;
}

// The same pipeline on plain fragments, the way the stage runner drove them before.
Run TrainPlain(int steps) {
  const ModelConfig c = MakeConfig(2, 32, 4, 67, 16);
  auto ops = *kernels::MakeOps("cpu-ref", 1);
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

TEST_CASE("one replica is the plain fragment, bit for bit") {
  const Run plain = TrainPlain(4), one = Train(1, 4);
  CHECK(one.losses == plain.losses);
  CHECK(one.first_params == plain.first_params);
  CHECK(one.last_params == plain.last_params);
}

TEST_CASE("two and three replicas train to the same losses and parameters") {
  const Run one = Train(1, 5);
  for (int replicas : {2, 3}) {  // 3: rows 2, 1, 1
    INFO(replicas << " replicas");
    const Run many = Train(replicas, 5);
    CHECK(many.first_output == one.first_output);  // rows are independent in the forward pass
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
    CHECK(sharded.losses == replicated.losses);
    CHECK(sharded.first_params == replicated.first_params);
    CHECK(sharded.last_params == replicated.last_params);
    // The moments gathered from the parts are the replicated ones (checkpoints unchanged).
    CHECK(sharded.first_m == replicated.first_m);
    CHECK(sharded.first_v == replicated.first_v);
    CHECK(MaxAbsDiff(sharded.first_m, std::vector<float>(sharded.first_m.size(), 0.0f)) > 0);
    // Each replica holds 1/R of the optimizer state.
    CHECK(sharded.first_optimizer_bytes * replicas <= replicated.first_optimizer_bytes);
    CHECK(sharded.first_optimizer_bytes * replicas >
          replicated.first_optimizer_bytes - 8 * replicas);
  }
  // One replica: nothing to shard, the plain fragment.
  CHECK(Train(1, 3, /*shard=*/true).losses == Train(1, 3).losses);
}

TEST_CASE("each replica's memory, sharded or not, is the cost model's prediction within 10%") {
  // A fragment whose AdamW state is most of it: a wide embedding, small activations.
  const ModelConfig c = MakeConfig(2, 128, 4, 4000, 16);
  for (int replicas : {1, 2, 4}) {
    for (bool shard : {false, true}) {
      INFO(replicas << " replicas, " << (shard ? "sharded" : "replicated"));
      std::vector<std::unique_ptr<kernels::Ops>> owned;
      std::vector<kernels::Ops*> ops;
      for (int i = 0; i < replicas; ++i) {
        owned.push_back(*kernels::MakeOps("cpu-ref", 1));
        ops.push_back(owned.back().get());
      }
      FragmentOptions o{.begin = 0, .end = 2, .batch_size = 4, .seq_len = 16, .slots = 2};
      o.shard_optimizer = shard;
      auto f = ReplicatedFragment::Create(c, o, ops);
      REQUIRE(f.ok());
      const int64_t total = (*f)->layout().total();
      const std::vector<int> rows = ReplicatedFragment::ReplicaRows(4, replicas);
      for (int i = 0; i < replicas; ++i) {
        FragmentOptions part = o;
        part.batch_size = rows[static_cast<size_t>(i)];
        if (shard && replicas > 1) {
          part.optimizer_begin = total * i / replicas;
          part.optimizer_end = total * (i + 1) / replicas;
        }
        const int64_t predicted = Fragment::EstimateMemory(c, part).total();
        const int64_t measured = ops[static_cast<size_t>(i)]->peak_allocated_bytes();
        INFO("replica " << i << ": measured " << measured << " bytes, predicted " << predicted);
        CHECK(measured > 0);
        CHECK(std::fabs(static_cast<double>(measured - predicted)) <= 0.10 * predicted);
      }
    }
  }
}

TEST_CASE("more replicas than sequences is refused, saying why") {
  const ModelConfig c = MakeConfig(2, 32, 4, 67, 16);
  std::vector<std::unique_ptr<kernels::Ops>> owned;
  std::vector<kernels::Ops*> r;
  for (int i = 0; i < 3; ++i) {
    owned.push_back(*kernels::MakeOps("cpu-ref", 1));
    r.push_back(owned.back().get());
  }
  FragmentOptions o{.begin = 0, .end = 2, .batch_size = 2, .seq_len = kT, .slots = 1};
  auto f = ReplicatedFragment::Create(c, o, r);
  REQUIRE_FALSE(f.ok());
  CHECK_THAT(std::string(f.status().message()), Catch::Contains("3 replicas"));
  CHECK_THAT(std::string(f.status().message()), Catch::Contains("microbatch of 2"));
}

// The sharded step's gather (kernels/replica_reducer.h): each replica's own part reaches every
// other replica, nothing else is written; parts may be empty; bad parts are refused, naming why.
TEST_CASE("the host reducer's all-gather copies each replica's part to the others") {
  std::vector<std::unique_ptr<kernels::Ops>> owned;
  std::vector<kernels::Ops*> ops;
  for (int i = 0; i < 3; ++i) {
    owned.push_back(*kernels::MakeOps("cpu-ref", 1));
    ops.push_back(owned.back().get());
  }
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

}  // namespace
}  // namespace longhaul::model
