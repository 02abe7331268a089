// The subspace-cut variant (model/subspace.h): its fixed tables, its gradients against
// finite differences of its loss, the shape of what crosses a cut, and its job and file
// plumbing. Split invariance (bit for bit) is in split_invariance_test.cc.
#include "model/subspace.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/checkpoint.h"
#include "model/fragment.h"
#include "model/job.h"
#include "model/layout.h"
#include "model/targets_frame.h"
#include "test/model/test_util.h"

namespace longhaul::model {
namespace {

ModelConfig SubspaceConfig(int k) {
  ModelConfig c = MakeConfig(/*layers=*/2, /*channels=*/32, /*heads=*/4, /*vocab=*/67,
                             /*context=*/16);
  c.residual_subspace = k;
  return c;
}

TEST_CASE("subspace tables: orthonormal basis, fixed by the shape alone", "[subspace]") {
  const ModelConfig c = SubspaceConfig(8);
  const SubspaceTables t = MakeSubspaceTables(c);
  const int C = c.channels, K = c.residual_subspace;
  REQUIRE(t.basis.size() == size_t(C) * K);
  double worst = 0.0;
  for (int i = 0; i < K; ++i) {
    for (int j = 0; j < K; ++j) {
      double dot = 0.0;
      for (int r = 0; r < C; ++r) dot += double(t.basis[r * K + i]) * t.basis[r * K + j];
      const double d = std::fabs(dot - (i == j ? 1.0 : 0.0));
      worst = std::isnan(d) ? d : std::max(worst, d);  // NaN sticks: it fails the check
    }
  }
  CHECK(worst < 1e-6);
  for (int r = 0; r < C; ++r) {
    for (int j = 0; j < K; ++j) CHECK(t.basis_transposed[j * C + r] == t.basis[r * K + j]);
  }
  // Rows of the padded vocabulary stay zero; real rows do not.
  double pad = 0.0, real = 0.0;
  for (size_t i = 0; i < t.token_table.size(); ++i) {
    (i < size_t(c.vocab_size) * C ? real : pad) += std::fabs(t.token_table[i]);
  }
  CHECK(pad == 0.0);
  CHECK(real > 0.0);
  // The same shape gives the same tables (every site builds them alone); another K others.
  const SubspaceTables again = MakeSubspaceTables(c);
  CHECK(again.basis == t.basis);
  CHECK(again.token_table == t.token_table);
  CHECK(MakeSubspaceTables(SubspaceConfig(4)).token_table != t.token_table);
}

TEST_CASE("subspace layout: K-row writes, an untied head, one more slice", "[subspace]") {
  const ModelConfig c = SubspaceConfig(8);
  const ParameterLayout p(c);
  CHECK(p.slice_size(Tensor::kWte) == int64_t(c.padded_vocab_size) * 8);
  CHECK(p.slice_size(Tensor::kWpe) == int64_t(c.max_seq_len) * 8);
  CHECK(p.slice_size(Tensor::kAttprojw) == 8 * 32);
  CHECK(p.slice_size(Tensor::kFcprojw) == 8 * 4 * 32);
  CHECK(p.slice_size(Tensor::kFcprojb) == 8);
  CHECK(p.size(Tensor::kHead) == int64_t(c.padded_vocab_size) * 32);
  CHECK(p.num_slices() == 5 + 12 * 2);
  CHECK(p.SliceIndex(Tensor::kHead, 0) == p.num_slices() - 1);
  const FragmentLayout first(c, 0, 1), last(c, 1, 2);
  CHECK(first.has(Tensor::kWte));
  CHECK(!first.has(Tensor::kHead));
  CHECK(!last.has(Tensor::kWte));  // untied: the last fragment holds the head instead
  CHECK(last.has(Tensor::kHead));
  // The standard model is unchanged: no head tensor, the tied copy on the last fragment.
  const ModelConfig standard = SubspaceConfig(0);
  const ParameterLayout s(standard);
  CHECK(s.size(Tensor::kHead) == 0);
  CHECK(s.num_slices() == 4 + 12 * 2);
  CHECK(FragmentLayout(standard, 1, 2).has(Tensor::kWte));
  // An unconstrained last layer writes C rows: its slices are the standard model's.
  ModelConfig free = c;
  free.unconstrained_layers = 1;
  const ParameterLayout f(free);
  CHECK(f.slice_size(Tensor::kAttprojw, 0) == 8 * 32);
  CHECK(f.slice_size(Tensor::kAttprojw, 1) == 32 * 32);
  CHECK(f.offset(Tensor::kAttprojw, 1) == f.offset(Tensor::kAttprojw) + 8 * 32);
  CHECK(f.size(Tensor::kFcprojb) == 8 + 32);
  CHECK(FragmentLayout(free, 1, 2).size(Tensor::kFcprojw) == 32 * 4 * 32);
  CHECK(StreamWidth(free, 1) == 8);  // the cut before the unconstrained layer: coordinates
  CHECK(StreamWidth(free, 2) == 32);
  free.unconstrained_layers = 2;
  CHECK(!ValidateConfig(free).ok());  // at least one layer stays constrained
}

// Gradients of every tensor against central differences of the mean loss, on the reference
// backend: the entries with the largest gradient of each tensor (where float rounding of the
// loss is small against the difference).
TEST_CASE("subspace gradients match finite differences of the loss", "[subspace]") {
  ModelConfig c = SubspaceConfig(8);
  c.unconstrained_layers = GENERATE(0, 1);  // 1: layer 1 writes the full stream
  INFO(c.DebugString());
  auto ops = kernels::MakeOps("cpu-ref", 1);
  REQUIRE(ops.ok());
  constexpr int B = 2, T = 16;
  auto f = Fragment::Create(c, FragmentOptions{.begin = 0, .end = 2, .batch_size = B, .seq_len = T},
                            ops->get());
  REQUIRE(f.ok());
  (*f)->InitParameters(3);
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = (i * 7 + 3) % c.vocab_size;
    targets[i] = (i * 11 + 5) % c.vocab_size;
  }
  const FragmentLayout& layout = (*f)->layout();
  std::vector<float> params(layout.total());
  (*f)->GetParameters(params.data());
  // Larger weights than the initialisation's, so every path carries real signal.
  for (size_t i = 0; i < params.size(); ++i) params[i] *= 4.0f;
  (*f)->SetParameters(params.data());
  (*f)->ZeroGrads();
  REQUIRE((*f)->Forward(0, tokens.data(), nullptr).ok());
  REQUIRE((*f)->Loss(0, targets.data()).ok());
  REQUIRE((*f)->Backward(0, nullptr, 1.0f / (B * T)).ok());
  (*f)->CombineTiedGrads();
  CHECK((*f)->TiedGradPeer() == nullptr);
  std::vector<float> grads(layout.total());
  (*f)->GetGradients(grads.data());
  auto loss_at = [&](int64_t i, float value) {
    std::vector<float> p = params;
    p[i] = value;
    (*f)->SetParameters(p.data());
    REQUIRE((*f)->Forward(0, tokens.data(), nullptr).ok());
    auto loss = (*f)->Loss(0, targets.data());
    REQUIRE(loss.ok());
    return double(*loss);
  };
  for (int t = 0; t < kNumTensors; ++t) {
    const Tensor tensor = Tensor(t);
    if (!layout.has(tensor)) continue;
    int64_t best = layout.offset(tensor);
    for (int64_t i = layout.offset(tensor); i < layout.offset(tensor) + layout.size(tensor); ++i) {
      if (std::fabs(grads[i]) > std::fabs(grads[best])) best = i;
    }
    // A step that moves the loss by about 1e-3: far above its float rounding (~1e-7), small
    // enough that the curvature stays out of the difference.
    const float eps = std::clamp(1e-3f / std::fabs(grads[best]), 1e-4f, 1e-1f);
    const double numeric =
        (loss_at(best, params[best] + eps) - loss_at(best, params[best] - eps)) / (2.0 * eps);
    INFO(TensorName(tensor) << "[" << best - layout.offset(tensor) << "]: analytic " << grads[best]
                            << ", numeric " << numeric);
    CHECK(std::fabs(grads[best]) > 1e-4);
    CHECK(std::fabs(numeric - grads[best]) < 0.01 * std::fabs(grads[best]) + 1e-4);
  }
}

TEST_CASE("subspace cut: K floats per position, tokens at every fragment", "[subspace]") {
  const ModelConfig c = SubspaceConfig(8);
  auto ops = kernels::MakeOps("cpu", 1);
  REQUIRE(ops.ok());
  constexpr int B = 1, T = 4;
  auto second = Fragment::Create(
      c, FragmentOptions{.begin = 1, .end = 2, .batch_size = B, .seq_len = T}, ops->get());
  REQUIRE(second.ok());
  CHECK((*second)->input_width() == 8);
  CHECK((*second)->output_width() == 8);
  CHECK((*second)->needs_tokens());
  std::vector<float> coords(B * T * 8, 0.1f);
  const Status missing = (*second)->Forward(0, nullptr, coords.data());
  CHECK(!missing.ok());
  CHECK(std::string(missing.message()).find("tokens") != std::string::npos);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  CHECK((*second)->Forward(0, tokens.data(), coords.data()).ok());
  // The standard model's later fragments need no tokens and carry C floats.
  auto standard = Fragment::Create(
      SubspaceConfig(0), FragmentOptions{.begin = 1, .end = 2, .batch_size = B, .seq_len = T},
      ops->get());
  REQUIRE(standard.ok());
  CHECK((*standard)->input_width() == 32);
  CHECK(!(*standard)->needs_tokens());
  // After the subspace variant's first unconstrained layer the stream is full width and
  // needs no rebuilding: no tokens either.
  ModelConfig free = MakeConfig(3, 32, 4, 67, 16);
  free.residual_subspace = 8;
  free.unconstrained_layers = 2;
  auto late = Fragment::Create(
      free, FragmentOptions{.begin = 2, .end = 3, .batch_size = B, .seq_len = T}, ops->get());
  REQUIRE(late.ok());
  CHECK((*late)->input_width() == 32);
  CHECK(!(*late)->needs_tokens());
}

// The targets frame a stage sends the next: the targets, and for the variant each
// sequence's T + 1 tokens; a value that is no token id is refused before any conversion.
TEST_CASE("targets frame: round trip, and values that are no token ids", "[subspace]") {
  constexpr int B = 2, T = 3;
  const std::vector<int32_t> inputs = {1, 2, 3, 10, 11, 12}, targets = {2, 3, 4, 11, 12, 13};
  for (int k : {0, 8}) {
    const ModelConfig c = SubspaceConfig(k);
    INFO("K = " << k);
    const std::vector<float> frame = PackTargetsFrame(c, B, T, inputs.data(), targets.data());
    CHECK(frame.size() == size_t(B) * (k > 0 ? T + 1 : T));
    std::vector<int32_t> in(B * T, -1), out(B * T, -1);
    REQUIRE(UnpackTargetsFrame(c, B, T, frame, in.data(), out.data()).ok());
    CHECK(out == targets);
    if (k > 0) CHECK(in == inputs);
    for (float bad : {std::nanf(""), 1e20f, -1.0f, 67.0f, 2.5f}) {
      std::vector<float> hostile = frame;
      hostile[1] = bad;
      const Status s = UnpackTargetsFrame(c, B, T, hostile, in.data(), out.data());
      INFO(bad);
      CHECK(!s.ok());
      CHECK(std::string(s.message()).find("not a token id") != std::string::npos);
    }
  }
}

// Token ids are 32-bit: ids above 65535 (llama-3's vocabulary of 128,256, and up to 2^24,
// the last integer a float holds exactly) travel exactly; a larger vocabulary is refused.
TEST_CASE("targets frame: ids above 16 bits round trip exactly", "[subspace]") {
  constexpr int B = 2, T = 3;
  for (int vocab : {128256, kMaxFrameVocab}) {
    const int top = vocab - 1;
    // Two sequences of T + 1 tokens: inputs are their first T, targets their last T.
    const std::vector<int32_t> inputs = {65535, 65536, 70000, top - 3, 0, top - 1};
    const std::vector<int32_t> targets = {65536, 70000, 128255, 0, top - 1, top};
    for (int k : {0, 8}) {
      ModelConfig c = SubspaceConfig(k);
      c.vocab_size = vocab;
      INFO("V = " << vocab << ", K = " << k);
      const std::vector<float> frame = PackTargetsFrame(c, B, T, inputs.data(), targets.data());
      std::vector<int32_t> in(B * T, -1), out(B * T, -1);
      REQUIRE(UnpackTargetsFrame(c, B, T, frame, in.data(), out.data()).ok());
      CHECK(out == targets);
      if (k > 0) CHECK(in == inputs);
    }
  }
  ModelConfig c = SubspaceConfig(0);
  c.vocab_size = kMaxFrameVocab + 1;
  const std::vector<float> frame(B * T, 1.0f);
  std::vector<int32_t> out(B * T);
  const Status s = UnpackTargetsFrame(c, B, T, frame, nullptr, out.data());
  CHECK(std::string(s.message()).find("vocabulary of 16777217 is above 16777216") !=
        std::string::npos);
}

TEST_CASE("subspace: job files, checkpoints and bad values", "[subspace]") {
  const std::string dir = testing::TempDir("subspace_job");
  const std::string job_path = dir + "/job.yaml";
  const std::string text =
      "name: s\nmodel: {layers: 2, channels: 32, heads: 4, vocab: 67, context: 16, "
      "residual_subspace: 8}\nsteps: 1\nbatch_size: 2\n";
  testing::WriteBytes(job_path, text);
  auto job = LoadJob(job_path);
  REQUIRE(job.ok());
  CHECK(job->model.residual_subspace == 8);
  CHECK(job->model.DebugString().find("K=8") != std::string::npos);

  std::string bad = text;
  bad.replace(bad.find("residual_subspace: 8"), 20, "residual_subspace: 33");
  testing::WriteBytes(job_path, bad);
  auto refused = LoadJob(job_path);
  REQUIRE(!refused.ok());
  CHECK(std::string(refused.status().message()).find("residual_subspace") != std::string::npos);

  // The checkpoint header carries K, so a file is read back as the model that wrote it.
  const ModelConfig c = SubspaceConfig(8);
  std::vector<float> params(NumParameters(c), 0.5f);
  const std::string ckpt = dir + "/model.bin";
  REQUIRE(WriteCheckpoint(ckpt, c, params.data()).ok());
  auto read = ReadCheckpoint(ckpt);
  REQUIRE(read.ok());
  CHECK(read->config == c);
  const Status mismatch = CheckConfigMatches(SubspaceConfig(0), read->config, ckpt);
  CHECK(std::string(mismatch.message()).find("residual_subspace 0 vs 8") != std::string::npos);
  ModelConfig free = c;
  free.unconstrained_layers = 1;
  std::vector<float> free_params(NumParameters(free), 0.5f);
  REQUIRE(WriteCheckpoint(ckpt, free, free_params.data()).ok());
  read = ReadCheckpoint(ckpt);
  REQUIRE(read.ok());
  CHECK(read->config == free);

  // unconstrained_layers needs the variant, and at least one constrained layer.
  for (const char* key :
       {"residual_subspace: 8, unconstrained_layers: 2", "unconstrained_layers: 1"}) {
    std::string t = text;
    t.replace(t.find("residual_subspace: 8"), 20, key);
    testing::WriteBytes(job_path, t);
    auto r = LoadJob(job_path);
    INFO(key);
    REQUIRE(!r.ok());
    CHECK(std::string(r.status().message()).find("unconstrained_layers") != std::string::npos);
  }
}

}  // namespace
}  // namespace longhaul::model
