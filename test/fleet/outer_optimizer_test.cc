// The DiLoCo outer step against the formulas worked by hand, the plain average it reduces to
// with lr 1 and no momentum, and its checks.
#include "fleet/outer_optimizer.h"

#include <catch2/catch.hpp>
#include <vector>

#include "fleet/sync_options.h"

namespace longhaul::fleet {
namespace {

TEST_CASE("the outer step is SGD with Nesterov momentum on the pseudo-gradient", "[fleet]") {
  OuterOptimizer o;
  o.Reset(std::vector<float>{1.0f, 2.0f});
  std::vector<float> delta(2);
  o.PseudoGradient(std::vector<float>{0.5f, 2.5f}, delta);
  CHECK(delta == std::vector<float>{0.5f, -0.5f});
  const OuterOptions opt{.lr = 0.5f, .momentum = 0.5f, .nesterov = true};
  o.Step(opt, delta);
  // buf = 0.5 delta... = delta; update = delta + 0.5 buf = 1.5 delta; anchor -= 0.5 update.
  CHECK(o.momentum() == std::vector<float>{0.5f, -0.5f});
  CHECK(o.anchor() == std::vector<float>{1.0f - 0.375f, 2.0f + 0.375f});
  o.Step(opt, delta);
  // buf = 0.5 * 0.5 + 0.5 = 0.75; update = 0.5 + 0.375 = 0.875; anchor -= 0.4375.
  CHECK(o.momentum() == std::vector<float>{0.75f, -0.75f});
  CHECK(o.anchor() == std::vector<float>{0.625f - 0.4375f, 2.375f + 0.4375f});

  OuterOptimizer heavy;  // without Nesterov the update is the buffer itself
  heavy.Reset(std::vector<float>{1.0f});
  heavy.Step({.lr = 0.5f, .momentum = 0.5f, .nesterov = false}, std::vector<float>{0.5f});
  heavy.Step({.lr = 0.5f, .momentum = 0.5f, .nesterov = false}, std::vector<float>{0.5f});
  CHECK(heavy.anchor() == std::vector<float>{1.0f - 0.25f - 0.375f});
}

TEST_CASE("with lr 1 and no momentum the outer step averages the replicas", "[fleet]") {
  OuterOptimizer o;
  o.Reset(std::vector<float>{4.0f, -2.0f, 0.0f});
  const std::vector<float> a = {3.0f, -1.0f, 0.5f}, b = {5.0f, -2.0f, 1.5f};
  std::vector<float> da(3), db(3), mean(3);
  o.PseudoGradient(a, da);
  o.PseudoGradient(b, db);
  for (int i = 0; i < 3; ++i) mean[i] = 0.5f * da[i] + 0.5f * db[i];
  o.Step({.lr = 1.0f, .momentum = 0.0f, .nesterov = true}, mean);
  CHECK(o.anchor() == std::vector<float>{4.0f, -1.5f, 1.0f});
}

TEST_CASE("a gossip node's own step moves its parameters; a part can start over", "[fleet]") {
  OuterOptimizer o;
  o.Reset(std::vector<float>{1.0f, 2.0f, 3.0f});
  std::vector<float> params = {0.5f, 2.5f, 3.0f}, scratch;
  const OuterOptions opt{.lr = 0.5f, .momentum = 0.5f, .nesterov = true};
  o.StepOwn(opt, params, &scratch);
  // delta (0.5, -0.5, 0); update 1.5 delta; the parameters are the new anchor.
  CHECK(o.anchor() == std::vector<float>{0.625f, 2.375f, 3.0f});
  CHECK(params == o.anchor());
  CHECK(o.momentum() == std::vector<float>{0.5f, -0.5f, 0.0f});
  // Floats [1, 3) start over from new values: anchor them, momentum 0; float 0 untouched.
  o.RestartPart(1, std::vector<float>{7.0f, 8.0f});
  CHECK(o.anchor() == std::vector<float>{0.625f, 7.0f, 8.0f});
  CHECK(o.momentum() == std::vector<float>{0.5f, 0.0f, 0.0f});
}

TEST_CASE("outer options and restored states are checked", "[fleet]") {
  CHECK(ValidateOuterOptions({}).ok());
  CHECK(!ValidateOuterOptions({.lr = 0}).ok());
  CHECK(!ValidateOuterOptions({.lr = 1, .momentum = 1}).ok());
  CHECK(!ValidateOuterOptions({.lr = 1, .momentum = -0.1f}).ok());
  OuterOptimizer o;
  CHECK(!o.Restore({1, 2}, {1}).ok());
  CHECK(!o.Restore({}, {}).ok());
  REQUIRE(o.Restore({1, 2}, {0.5f, 0}).ok());
  CHECK(o.size() == 2);

  SyncOptions s;
  CHECK(ValidateSyncOptions(s).ok());  // adaptive
  s.codec = "topk:0.01+q4";
  CHECK(ValidateSyncOptions(s).ok());
  s.codec = "exact";
  CHECK(ValidateSyncOptions(s).ok());
  CHECK(FixedSyncCodec("exact")->ToString() == "fp32");
  CHECK(!FixedSyncCodec("adaptive").ok());
  s.codec = "q5";
  CHECK(!ValidateSyncOptions(s).ok());
  s.codec = "q4";
  s.every = 0;
  CHECK(!ValidateSyncOptions(s).ok());
  CHECK(*ParseSyncMode("step") == SyncMode::kStep);
  CHECK(!ParseSyncMode("async").ok());
}

}  // namespace
}  // namespace longhaul::fleet
