// Several microbatches in flight: two fragments driven in a 1F1B order with two activation
// slots accumulate exactly the gradients of running the microbatches one after another;
// misuse of slots and of the last fragment's single head is an error, not a crash.
#include <catch2/catch.hpp>
#include <vector>

#include "kernels/ops.h"
#include "model/fragment.h"

namespace longhaul::model {
namespace {

constexpr int kB = 2, kT = 8;

struct Stages {
  std::unique_ptr<Fragment> first, last;
};

Stages Make(kernels::Ops* ops, const ModelConfig& c, int slots) {
  FragmentOptions a{.begin = 0, .end = 1, .batch_size = kB, .seq_len = kT, .slots = slots};
  FragmentOptions b{.begin = 1, .end = 2, .batch_size = kB, .seq_len = kT, .slots = slots};
  Stages s{*Fragment::Create(c, a, ops), *Fragment::Create(c, b, ops)};
  s.first->InitParameters(9);
  s.last->InitParameters(9);
  s.first->ZeroGrads();
  s.last->ZeroGrads();
  return s;
}

std::vector<int32_t> Tokens(int seed) {
  std::vector<int32_t> t(kB * kT);
  for (int i = 0; i < kB * kT; ++i) t[i] = (i * 7 + seed * 13) % 67;
  return t;
}

std::vector<float> Grads(Fragment& f) {
  std::vector<float> g(f.layout().total());
  f.GetGradients(g.data());
  return g;
}

TEST_CASE("1F1B with two slots matches sequential microbatches", "[slots]") {
  auto ops = kernels::MakeOps("cpu", 2);
  REQUIRE(ops.ok());
  const ModelConfig c = MakeConfig(2, 32, 4, 67, 16);
  const auto in0 = Tokens(0), tg0 = Tokens(1), in1 = Tokens(2), tg1 = Tokens(3);
  const float dloss = 1.0f / (2 * kB * kT);

  Stages seq = Make(ops->get(), c, 1);
  for (auto [in, tg] : {std::pair{&in0, &tg0}, {&in1, &tg1}}) {
    REQUIRE(seq.first->Forward(0, in->data(), nullptr).ok());
    REQUIRE(seq.last->Forward(0, nullptr, seq.first->Output(0)).ok());
    REQUIRE(seq.last->Loss(0, tg->data()).ok());
    REQUIRE(seq.last->Backward(0, nullptr, dloss).ok());
    REQUIRE(seq.first->Backward(0, seq.last->InputGrad(), 0).ok());
  }

  Stages p = Make(ops->get(), c, 2);
  REQUIRE(p.first->Forward(0, in0.data(), nullptr).ok());
  REQUIRE(p.first->Forward(1, in1.data(), nullptr).ok());  // two microbatches in flight
  REQUIRE(p.last->Forward(0, nullptr, p.first->Output(0)).ok());
  REQUIRE(p.last->Loss(0, tg0.data()).ok());
  REQUIRE(p.last->Backward(0, nullptr, dloss).ok());
  REQUIRE(p.first->Backward(0, p.last->InputGrad(), 0).ok());
  REQUIRE(p.last->Forward(1, nullptr, p.first->Output(1)).ok());
  REQUIRE(p.last->Loss(1, tg1.data()).ok());
  REQUIRE(p.last->Backward(1, nullptr, dloss).ok());
  REQUIRE(p.first->Backward(1, p.last->InputGrad(), 0).ok());

  CHECK(Grads(*p.first) == Grads(*seq.first));
  CHECK(Grads(*p.last) == Grads(*seq.last));
}

TEST_CASE("slot misuse is an error", "[slots]") {
  auto ops = kernels::MakeOps("cpu-ref");
  const ModelConfig c = MakeConfig(2, 32, 4, 67, 16);
  Stages s = Make(ops->get(), c, 2);
  const auto in = Tokens(0);
  CHECK(!s.first->Forward(2, in.data(), nullptr).ok());  // no such slot
  CHECK(!s.first->Backward(1, nullptr, 0).ok());         // no forward in the slot
  CHECK(!s.first->Forward(0, nullptr, nullptr).ok());    // first fragment needs tokens
  auto bad = in;
  bad[3] = 67;  // outside the vocabulary
  CHECK(absl::IsInvalidArgument(s.first->Forward(0, bad.data(), nullptr)));
  REQUIRE(s.first->Forward(0, in.data(), nullptr).ok());
  REQUIRE(s.first->Forward(1, in.data(), nullptr).ok());
  CHECK(!s.last->Forward(0, nullptr, nullptr).ok());  // later fragments need activations
  REQUIRE(s.last->Forward(0, nullptr, s.first->Output(0)).ok());
  REQUIRE(s.last->Forward(1, nullptr, s.first->Output(1)).ok());
  REQUIRE(s.last->Loss(0, in.data()).ok());
  REQUIRE(s.last->Loss(1, in.data()).ok());
  // The head now holds slot 1: backward of slot 0 must be refused.
  CHECK(absl::IsFailedPrecondition(s.last->Backward(0, nullptr, 1.0f)));
  CHECK(s.last->Backward(1, nullptr, 1.0f).ok());
  CHECK(!s.first->Loss(0, in.data()).ok());  // only the last fragment has a head

  FragmentOptions eval{.begin = 0, .end = 2, .batch_size = kB, .seq_len = kT, .training = false};
  auto f = Fragment::Create(c, eval, ops->get());
  REQUIRE(f.ok());
  REQUIRE((*f)->Forward(0, in.data(), nullptr).ok());
  REQUIRE((*f)->Loss(0, in.data()).ok());
  CHECK(!(*f)->Backward(0, nullptr, 1.0f).ok());

  FragmentOptions too_long{.begin = 0, .end = 2, .batch_size = 1, .seq_len = 17};
  CHECK(!Fragment::Create(c, too_long, ops->get()).ok());
  FragmentOptions empty{.begin = 1, .end = 1, .batch_size = 1, .seq_len = 4};
  CHECK(!Fragment::Create(c, empty, ops->get()).ok());
}

TEST_CASE("memory report adds up and matches the estimate", "[slots]") {
  const ModelConfig c = MakeConfig(2, 32, 4, 67, 16);
  FragmentOptions o{.begin = 0, .end = 2, .batch_size = kB, .seq_len = kT, .slots = 3};
  const MemoryReport r = Fragment::EstimateMemory(c, o);
  CHECK(r.parameters == NumParameters(c) * 4);
  CHECK(r.optimizer == 2 * r.parameters);
  CHECK(r.slots == 3);
  CHECK(r.total() ==
        r.parameters + r.gradients + r.optimizer + 3 * r.activations_per_slot + r.shared);
  o.training = false;
  CHECK(Fragment::EstimateMemory(c, o).gradients == 0);
}

}  // namespace
}  // namespace longhaul::model
