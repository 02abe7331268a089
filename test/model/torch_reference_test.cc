// The model checked against an independent PyTorch implementation (torch_reference.py,
// run with Debian's /usr/bin/python3 and python3-torch): loss, logits, every parameter
// gradient and one AdamW step with clipping and weight decay, on every CPU backend, plus
// evaluating the checkpoint PyTorch wrote. Errors are relative to each tensor's scale.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/ops.h"
#include "model/chain.h"
#include "model/checkpoint.h"
#include "model/evaluate.h"
#include "model/hf_checkpoint.h"
#include "model/layout.h"
#include "model/token_data.h"
#include "test/model/test_util.h"

namespace longhaul::model {
namespace {

using testing::ReadFloats;
using testing::RelError;

constexpr int kBatch = 3, kSeqLen = 16;
constexpr double kTol = 1e-4;

OptimizerOptions TestOptimizer() {
  OptimizerOptions o;
  o.lr = 1e-3f;
  o.beta1 = 0.9f;
  o.beta2 = 0.95f;
  o.eps = 1e-8f;
  o.weight_decay = 0.1f;
  o.grad_clip = 1.0f;
  return o;
}

// Runs the PyTorch reference once per test binary; returns its output directory.
const std::string& ReferenceDir() {
  static const std::string dir = [] {
    if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
      FAIL(
          "python3-torch is not importable by /usr/bin/python3: run tools/setup.sh (as root) "
          "to install Debian's python3-torch");
    }
    const std::string out = testing::TempDir("torch_reference");
    const OptimizerOptions o = TestOptimizer();
    const std::string cmd = absl::StrCat(
        "/usr/bin/python3 ", testing::Runfile("test/model/torch_reference.py"), " --out ", out,
        " --layers 2 --channels 32 --heads 4 --vocab 67 --context 20 --batch ", kBatch,
        " --seq-len ", kSeqLen, " --lr ", o.lr, " --beta1 ", o.beta1, " --beta2 ", o.beta2,
        " --eps ", o.eps, " --weight-decay ", o.weight_decay, " --grad-clip ", o.grad_clip);
    if (std::system(cmd.c_str()) != 0) FAIL("torch_reference.py failed: " << cmd);
    return out;
  }();
  return dir;
}

TEST_CASE("forward, backward and AdamW match PyTorch", "[torch]") {
  const std::string backend = GENERATE(as<std::string>{}, "cpu-ref", "cpu");
  INFO("backend " << backend);
  const std::string dir = ReferenceDir();
  auto ckpt = ReadCheckpoint(dir + "/model.bin");
  REQUIRE(ckpt.ok());
  const ModelConfig& config = ckpt->config;
  REQUIRE(config.padded_vocab_size == 128);
  REQUIRE(config.vocab_size == 67);
  const ParameterLayout layout(config);

  auto ops = kernels::MakeOps(backend, 2);
  REQUIRE(ops.ok());
  ChainOptions co;
  co.batch_size = kBatch;
  co.seq_len = kSeqLen;
  auto chain = FragmentChain::Create(config, co, ops->get());
  REQUIRE(chain.ok());
  Fragment& model = (*chain)->fragment(0);
  (*chain)->LoadFromModel(ckpt->params.data());

  // kLlmc: the file must be an llm.c token file, as torch_reference.py wrote it.
  auto batch = testing::FirstBatch(dir + "/tokens.bin", DataFormat::kLlmc, kBatch, kSeqLen);
  INFO(batch.status());
  REQUIRE(batch.ok());

  model.ZeroGrads();
  auto loss = (*chain)->ForwardLoss(batch->inputs.data(), batch->targets.data());
  REQUIRE(loss.ok());
  const float ref_loss = ReadFloats(dir + "/loss.f32").at(0);
  CHECK(std::fabs(*loss - ref_loss) / ref_loss < kTol);

  const std::vector<float> ref_logits = ReadFloats(dir + "/logits.f32");
  REQUIRE(ref_logits.size() == size_t(kBatch) * kSeqLen * config.padded_vocab_size);
  std::vector<float> logits(ref_logits.size());
  (*ops)->Download(logits.data(), model.logits(), logits.size());
  CHECK(RelError(logits.data(), ref_logits.data(), logits.size()) < kTol);

  REQUIRE((*chain)->Backward(1.0f / (kBatch * kSeqLen)).ok());
  model.CombineTiedGrads();
  std::vector<float> grads(layout.total());
  model.GetGradients(grads.data());
  const std::vector<float> ref_grads = ReadFloats(dir + "/grads.f32");
  REQUIRE(ref_grads.size() == size_t(layout.total()));
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    const int64_t off = layout.offset(t);
    const double err = RelError(grads.data() + off, ref_grads.data() + off, layout.size(t));
    INFO("gradient of " << TensorName(t) << ": relative error " << err);
    CHECK(err < kTol);
  }
  const float ref_norm = ReadFloats(dir + "/gradnorm.f32").at(0);
  CHECK(std::fabs(GradNorm(model.GradSliceSums()) - ref_norm) / ref_norm < kTol);

  // AdamW on PyTorch's own gradients, so the optimizer is checked in isolation (on the
  // first step AdamW's update is about lr * sign(g), which amplifies tiny gradient noise).
  model.SetGradients(ref_grads.data());
  const OptimizerOptions opt = TestOptimizer();
  const float norm = GradNorm(model.GradSliceSums());
  REQUIRE(norm > opt.grad_clip);  // clipping is exercised
  model.Step(opt, opt.lr, ClipScale(norm, opt.grad_clip), 1);
  std::vector<float> stepped(layout.total());
  model.GetParameters(stepped.data());
  const std::vector<float> ref_stepped = ReadFloats(dir + "/stepped.f32");
  REQUIRE(ref_stepped.size() == stepped.size());
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    // Compare the updates (after - before) relative to the largest reference update.
    const int64_t off = layout.offset(t), n = layout.size(t);
    std::vector<float> ours(n), ref(n);
    for (int64_t j = 0; j < n; ++j) {
      ours[j] = stepped[off + j] - ckpt->params[off + j];
      ref[j] = ref_stepped[off + j] - ckpt->params[off + j];
    }
    const double err = RelError(ours.data(), ref.data(), n);
    INFO("AdamW update of " << TensorName(t) << ": relative error " << err);
    CHECK(err < 1e-3);  // the updates are differences of O(1) parameters: ~1e-4 rounding
    CHECK(RelError(stepped.data() + off, ref_stepped.data() + off, n) < 1e-6);
  }
}

TEST_CASE("evaluating PyTorch's checkpoint gives PyTorch's loss", "[torch]") {
  const std::string backend = GENERATE(as<std::string>{}, "cpu-ref", "cpu");
  const std::string dir = ReferenceDir();
  EvalOptions eo;
  eo.checkpoint = dir + "/model.bin";
  eo.data = dir + "/tokens.bin";
  eo.batches = 0;
  eo.batch_size = kBatch;
  eo.seq_len = kSeqLen;
  eo.backend = backend;
  eo.threads = 2;
  auto result = EvaluateCheckpoint(eo);
  REQUIRE(result.ok());
  CHECK(result->batches == 1);
  const float ref_loss = ReadFloats(dir + "/loss.f32").at(0);
  CHECK(std::fabs(result->mean_loss - ref_loss) / ref_loss < kTol);
}

// Our Hugging Face export of a GPT-2 (Conv1D weights transposed, GPT-2's names) read by the
// script's own GPT2LMHeadModel-convention forward, to the reference logits.
TEST_CASE("PyTorch reads our Hugging Face GPT-2 export to the same logits", "[torch][hf]") {
  const std::string dir = ReferenceDir();
  auto ckpt = ReadCheckpoint(dir + "/model.bin");
  REQUIRE(ckpt.ok());
  const std::string out = testing::TempDir("torch_reference_hf");
  REQUIRE(WriteHfCheckpoint(out, ckpt->config, ckpt->params.data()).ok());
  const std::string cmd = absl::StrCat(
      "/usr/bin/python3 ", testing::Runfile("test/model/torch_reference.py"), " --out ", dir,
      " --batch ", kBatch, " --seq-len ", kSeqLen, " --check-hf ", out, " --tol 1e-4");
  CHECK(std::system(cmd.c_str()) == 0);
}

}  // namespace
}  // namespace longhaul::model
