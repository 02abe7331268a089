// StageExchange (daemon/job/exchange/stage_exchange.h) between two stages wired by fake links: what
// stage 0 sends arrives in stage 1's inbox and decodes to the values sent (exactly with
// compression off, within q8's bound with a fixed q8), the usage of each link counts what
// crossed, and a tensor the neighbour refuses ends the sending stage's next wait with the
// refusal, naming the tensor and the peer, instead of a wait without end.
#include "daemon/job/exchange/stage_exchange.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "test/daemon/fake_link.h"

namespace longhaul::daemon {
namespace {

constexpr int kB = 2, kT = 4, kC = 8;
constexpr size_t kAct = size_t{kB} * kT * kC;

// Two stages of one job, alpha (stage 0) -> beta (stage 1), each with its inbox and its
// sender to the other over a fake link that files what it carries in the other's inbox.
struct Pair {
  LinkMonitor monitor{"alpha"};
  Inbox inbox0{1 << 20}, inbox1{1 << 20};
  testing::FakeLink link01{"beta"}, link10{"alpha"};
  std::unique_ptr<LinkSender> to_next, to_prev;
  std::atomic<bool> stop{false};
  std::unique_ptr<StageExchange> x0, x1;
  std::string gradients_codec;
  std::vector<std::string> activations_ladder;  // empty: the default

  explicit Pair(CompressionMode mode, std::string gradients_codec = "q8",
                std::vector<std::string> activations_ladder = {})
      : gradients_codec(std::move(gradients_codec)),
        activations_ladder(std::move(activations_ladder)) {
    link01.OnDeliver(testing::IntoInbox(&inbox1));
    link10.OnDeliver(testing::IntoInbox(&inbox0));
    LinkSenderOptions so;
    so.site = "alpha";
    so.peer = "beta";
    to_next = std::make_unique<LinkSender>(so, &link01, &monitor, spdlog::default_logger());
    so.site = "beta";
    so.peer = "alpha";
    to_prev = std::make_unique<LinkSender>(so, &link10, &monitor, spdlog::default_logger());
    x0 = Make(mode, 0, &inbox0);
    x1 = Make(mode, 1, &inbox1);
  }
  ~Pair() {
    stop = true;
    to_next->Close();
    to_prev->Close();
  }
  std::unique_ptr<StageExchange> Make(CompressionMode mode, int stage, Inbox* inbox) {
    StageExchangeOptions o;
    o.site = stage == 0 ? "alpha" : "beta";
    o.job_id = "j-000001";
    o.attempt = 1;
    o.stage = stage;
    o.num_stages = 2;
    o.compression = mode;
    o.activations.codec = "q8";
    if (!activations_ladder.empty()) {
      o.activations.ladder = activations_ladder;
      o.activations.floor = activations_ladder.back();
    }
    o.gradients.codec = gradients_codec;
    o.gradients.ladder = {"fp32", "bf16", "q8", "q4", "q8:sr", "q4:sr"};
    o.monitor = &monitor;
    o.inbox = inbox;
    o.heartbeat_seconds = 0.05;
    o.stop = &stop;
    if (stage == 0) {
      o.to_next = to_next.get();
      o.next_site = "beta";
    } else {
      o.to_prev = to_prev.get();
      o.prev_site = "alpha";
    }
    o.host_floats = kAct;
    auto x = StageExchange::Create(std::move(o));
    REQUIRE(x.ok());
    inbox->StartAttempt(1, 0);
    return std::move(*x);
  }
};

std::vector<float> Values() {
  std::vector<float> v(kAct);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * 3;
  return v;
}

TEST_CASE("stage exchange: compression off delivers the exact values, counted per link") {
  Pair p(CompressionMode::kOff);
  const std::vector<float> sent = Values();
  REQUIRE(p.x0->Send(StageExchange::To::kNext, v1::TENSOR_KIND_ACTIVATION, 0, 0, sent.data(), kAct,
                     {kB, kT, kC}, /*adaptive=*/true)
              .ok());
  std::vector<float> got(kAct);
  REQUIRE(p.x1->Receive(v1::TENSOR_KIND_ACTIVATION, 0, 0, got.data(), kAct).ok());
  CHECK(got == sent);
  const auto usage = p.x0->Usage(false);
  REQUIRE(usage.size() == 1);
  CHECK(usage[0].to_site == "beta");
  CHECK(usage[0].codec == "fp32");
  CHECK(usage[0].tensors == 1);
  CHECK(usage[0].raw_bytes == kAct * sizeof(float));
  CHECK(usage[0].wire_bytes >= usage[0].raw_bytes);  // the frame's header on top
  const std::vector<transport::WireTensor> delivered = p.link01.delivered();
  REQUIRE(delivered.size() == 1);
  const transport::WireTensor& t = delivered[0];
  CHECK(t.header.from_stage() == 0);
  CHECK(t.header.to_stage() == 1);
  CHECK(t.header.attempt() == 1);
}

TEST_CASE("stage exchange: a fixed q8 stays within its bound and shrinks the wire bytes") {
  Pair p(CompressionMode::kFixed);
  const std::vector<float> sent = Values();
  REQUIRE(p.x0->Send(StageExchange::To::kNext, v1::TENSOR_KIND_ACTIVATION, 0, 1, sent.data(), kAct,
                     {kB, kT, kC}, true)
              .ok());
  // Not adaptive (the targets travel exact whatever the mode).
  REQUIRE(p.x0->Send(StageExchange::To::kNext, v1::TENSOR_KIND_TARGETS, 0, 1, sent.data(), kB * kT,
                     {kB, kT}, false)
              .ok());
  std::vector<float> got(kAct), targets(kB * kT);
  REQUIRE(p.x1->Receive(v1::TENSOR_KIND_ACTIVATION, 0, 1, got.data(), kAct).ok());
  REQUIRE(p.x1->Receive(v1::TENSOR_KIND_TARGETS, 0, 1, targets.data(), kB * kT).ok());
  for (size_t i = 0; i < kAct; ++i) CHECK(std::fabs(got[i] - sent[i]) <= 3.0f / 127 + 1e-6f);
  CHECK(std::vector<float>(sent.begin(), sent.begin() + kB * kT) == targets);
  const auto usage = p.x0->Usage(false);
  CHECK(usage[0].codec == "q8");
  CHECK(usage[0].tensors == 2);
}

// Activations and their gradients have their own codecs (compression.activations /
// .gradients): here q8 forward, q4 with stochastic rounding back.
TEST_CASE("stage exchange: each direction sends with its own codec") {
  Pair p(CompressionMode::kFixed, "q4:sr");
  const std::vector<float> sent = Values();
  REQUIRE(p.x0->Send(StageExchange::To::kNext, v1::TENSOR_KIND_ACTIVATION, 0, 0, sent.data(), kAct,
                     {kB, kT, kC}, true)
              .ok());
  REQUIRE(p.x1->Send(StageExchange::To::kPrev, v1::TENSOR_KIND_ACTIVATION_GRAD, 0, 0, sent.data(),
                     kAct, {kB, kT, kC}, true)
              .ok());
  std::vector<float> act(kAct), grad(kAct);
  REQUIRE(p.x1->Receive(v1::TENSOR_KIND_ACTIVATION, 0, 0, act.data(), kAct).ok());
  REQUIRE(p.x0->Receive(v1::TENSOR_KIND_ACTIVATION_GRAD, 0, 0, grad.data(), kAct).ok());
  // The largest error; NaN sticks (std::max(worst, NaN) would be worst): a NaN fails the checks.
  auto worse = [](float worst, float d) { return std::isnan(d) ? d : std::max(worst, d); };
  float worst_act = 0, worst_grad = 0;
  for (size_t i = 0; i < kAct; ++i) {
    worst_act = worse(worst_act, std::fabs(act[i] - sent[i]));
    worst_grad = worse(worst_grad, std::fabs(grad[i] - sent[i]));
  }
  CHECK(worst_act <= 3.0f / 127 + 1e-6f);  // q8: half a step of 3 / 127
  CHECK(worst_grad <= 6.0f / 7 + 1e-5f);   // q4 stochastic: within one step of 3 / 7
  CHECK(worst_grad > worst_act);
  CHECK(p.x0->Usage(false)[0].codec == "q8");
  CHECK(p.x1->Usage(false)[0].codec == "q4:sr");
}

// A ladder need not start with fp32: what is not adaptive (targets, tokens) still travels
// exactly. bf16 would round token ids above 256.
TEST_CASE("stage exchange: exact tensors stay exact whatever a direction's ladder") {
  Pair p(CompressionMode::kFixed, "q8", {"bf16", "q8"});
  std::vector<float> ids(kB * kT);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<float>(50001 + 7 * i);
  REQUIRE(p.x0->Send(StageExchange::To::kNext, v1::TENSOR_KIND_TARGETS, 0, 0, ids.data(),
                     ids.size(), {kB, kT}, /*adaptive=*/false)
              .ok());
  std::vector<float> got(ids.size());
  REQUIRE(p.x1->Receive(v1::TENSOR_KIND_TARGETS, 0, 0, got.data(), got.size()).ok());
  CHECK(got == ids);
}

TEST_CASE("compression.activations and .gradients in a job file") {
  const std::string base =
      "name: j\nmodel: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}\n"
      "data: {train: builtin}\nsteps: 2\nbatch_size: 2\nsites: [a, b]\nplacement: even\n";
  auto spec = ParseJobSpec(base +
                               "compression:\n  floor: q4\n  gradients:\n"
                               "    ladder: [fp32, bf16, q8:sr, q4:sr]\n    floor: q4:sr\n",
                           "job.yaml", ".");
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  const JobSpec::DirectionCodecs act = ResolvedCodecs(*spec, false);
  const JobSpec::DirectionCodecs grad = ResolvedCodecs(*spec, true);
  CHECK(act.ladder == compression::ControllerOptions().ladder);
  CHECK(act.floor == "q4");
  CHECK(grad.ladder == std::vector<std::string>{"fp32", "bf16", "q8:sr", "q4:sr"});
  CHECK(grad.floor == "q4:sr");
  // A floor off its direction's ladder, a bad rung, a fixed codec off the ladder: refused,
  // naming the file, the key and the ladder.
  for (const auto& [extra, says] : std::vector<std::pair<std::string, std::string>>{
           {"compression: {gradients: {ladder: [fp32, q8:sr]}}",
            "compression.floor 'q4' is not on compression.gradients.ladder"},
           {"compression: {gradients: {ladder: [fp32, q9]}}", "q9"},
           {"compression: {mode: fixed, activations: {codec: q4:sr}}",
            "compression.activations.codec 'q4:sr' is not on the default ladder"},
           {"compression: {gradients: {ladder: []}}", "non-empty list"}}) {
    auto bad = ParseJobSpec(base + extra + "\n", "job.yaml", ".");
    INFO(extra);
    REQUIRE_FALSE(bad.ok());
    CHECK_THAT(std::string(bad.status().message()), Catch::StartsWith("job.yaml:"));
    CHECK_THAT(std::string(bad.status().message()), Catch::Contains(says));
  }
}

TEST_CASE("a cut of subspace coordinates keeps 8 bits per value unless the job sets a floor") {
  const std::string base =
      "name: j\nmodel: {layers: 4, channels: 32, heads: 2, vocab: 256, context: 32,\n"
      "  residual_subspace: 8, unconstrained_layers: 2}\n"
      "data: {train: builtin}\nsteps: 2\nbatch_size: 2\nsites: [a, b]\nplacement: even\n";
  auto plain = ParseJobSpec(base, "job.yaml", ".");
  INFO(plain.status().ToString());
  REQUIRE(plain.ok());
  // Boundaries 0..2 carry coordinates (the first L - F = 2 layers write the subspace).
  CHECK(model::CoordinateBoundary(plain->job.model, 2));
  CHECK_FALSE(model::CoordinateBoundary(plain->job.model, 3));
  for (bool gradients : {false, true}) {
    CHECK(ResolvedCodecs(*plain, gradients, /*coordinates=*/true).floor == "q8");
    CHECK(ResolvedCodecs(*plain, gradients, /*coordinates=*/false).floor == "q4");
  }
  // A stochastic gradient ladder: its 8-bit rung.
  auto sr = ParseJobSpec(base +
                             "compression: {gradients: {ladder: [fp32, bf16, q8:sr, q4:sr], "
                             "floor: q4:sr}}\n",
                         "job.yaml", ".");
  REQUIRE(sr.ok());
  CHECK(ResolvedCodecs(*sr, true, true).floor == "q4:sr");  // the direction's own floor wins
  auto sr_default = ParseJobSpec(
      base +
          "compression: {floor: q4:sr, activations: {ladder: [fp32, bf16, q8:sr, q4:sr]}, "
          "gradients: {ladder: [fp32, bf16, q8:sr, q4:sr]}}\n",
      "job.yaml", ".");
  INFO(sr_default.status().ToString());
  REQUIRE(sr_default.ok());
  CHECK(ResolvedCodecs(*sr_default, true, true).floor == "q4:sr");  // compression.floor given
  // Not given anywhere, on a ladder whose 8-bit rung rounds stochastically.
  auto sr_ladder = ParseJobSpec(base + "compression: {gradients: {ladder: [fp32, q8:sr, q4]}}\n",
                                "job.yaml", ".");
  INFO(sr_ladder.status().ToString());
  REQUIRE(sr_ladder.ok());
  CHECK(ResolvedCodecs(*sr_ladder, true, true).floor == "q8:sr");
  CHECK(ResolvedCodecs(*sr_ladder, false, true).floor == "q8");
  // An explicit floor of q4 is the job's choice.
  auto given = ParseJobSpec(base + "compression: {floor: q4}\n", "job.yaml", ".");
  REQUIRE(given.ok());
  CHECK(ResolvedCodecs(*given, false, true).floor == "q4");
  // A ladder with nothing lossy of 8 bits or more above the floor keeps the floor (never
  // exact fp32 by default).
  auto coarse =
      ParseJobSpec(base + "compression: {activations: {ladder: [fp32, q4]}}\n", "job.yaml", ".");
  REQUIRE(coarse.ok());
  CHECK(ResolvedCodecs(*coarse, false, true).floor == "q4");
}

TEST_CASE("stage exchange: a size other than expected is refused at the receiver") {
  Pair p(CompressionMode::kOff);
  const std::vector<float> sent = Values();
  REQUIRE(p.x0->Send(StageExchange::To::kNext, v1::TENSOR_KIND_ACTIVATION, 0, 0, sent.data(),
                     kAct - 1, {static_cast<int64_t>(kAct) - 1}, true)
              .ok());
  std::vector<float> got(kAct);
  const Status s = p.x1->Receive(v1::TENSOR_KIND_ACTIVATION, 0, 0, got.data(), kAct);
  CHECK_FALSE(s.ok());
}

TEST_CASE("stage exchange: a refused send ends the sender's next wait, naming peer and tensor") {
  Pair p(CompressionMode::kOff);
  p.link01.Script({absl::InvalidArgumentError("beta does not expect it")});
  const std::vector<float> sent = Values();
  REQUIRE(p.x0->Send(StageExchange::To::kNext, v1::TENSOR_KIND_ACTIVATION, 0, 0, sent.data(), kAct,
                     {kB, kT, kC}, true)
              .ok());
  // Stage 0 now waits for the gradient that beta, which never got the activation, will not send.
  std::vector<float> grad(kAct);
  const Status s = p.x0->Receive(v1::TENSOR_KIND_ACTIVATION_GRAD, 0, 0, grad.data(), kAct);
  REQUIRE_FALSE(s.ok());
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("to site 'beta' failed"));
  CHECK_THAT(std::string(s.message()), Catch::Contains("beta does not expect it"));
  CHECK_THAT(std::string(s.message()), Catch::Contains("TENSOR_KIND_ACTIVATION"));
  CHECK(p.x0->SendError() == s);
}

TEST_CASE("stage exchange: a stopped stage's wait ends") {
  Pair p(CompressionMode::kOff);
  p.stop = true;
  std::vector<float> grad(kAct);
  CHECK(p.x0->Receive(v1::TENSOR_KIND_ACTIVATION_GRAD, 0, 0, grad.data(), kAct).code() ==
        absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace longhaul::daemon
