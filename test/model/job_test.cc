// Job files: the example parses; every kind of malformed job gives an error that names
// file:line:column and the key.
#include "model/job.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "test/model/test_util.h"

namespace longhaul::model {
namespace {

using Catch::Matchers::Contains;

const char kValid[] = R"(name: t
model: {layers: 2, channels: 32, heads: 4, vocab: 256, context: 16}
steps: 10
batch_size: 4
)";

std::string ErrorOf(const std::string& text, const std::string& dir = "/nonexistent") {
  auto job = ParseJob(text, "job.yaml", dir);
  if (job.ok()) return "(parsed)";
  return std::string(job.status().message());
}

TEST_CASE("the example job parses", "[job]") {
  auto job = LoadJob(testing::Runfile("configs/job.example.yaml"));
  REQUIRE(job.ok());
  CHECK(job->name == "tiny-builtin");
  CHECK(job->model == MakeConfig(4, 128, 4, 256, 64));
  CHECK(job->data.train == "builtin");
  CHECK(job->batch_size % job->microbatch_size == 0);
  CHECK(job->optimizer.schedule == LrSchedule::kCosine);
  CHECK(job->backend == "cpu");
}

TEST_CASE("the llama example job parses, and llama keys are checked", "[job][llama]") {
  auto job = LoadJob(testing::Runfile("configs/llama-job.example.yaml"));
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  const ModelConfig& c = job->model;
  CHECK(c.family == Family::kLlama);
  CHECK(c.num_kv_heads == 2);
  CHECK(c.head_dim == 16);
  CHECK(c.intermediate_size == 352);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_scaling == RopeScaling{8.0, 1.0, 4.0, 64});
  CHECK(!c.tied_embeddings);
  const std::string head =
      "name: t\nsteps: 1\nbatch_size: 1\nmodel: {layers: 2, channels: 32, "
      "heads: 4, vocab: 256, context: 16, ";
  CHECK(ParseJob(head + "family: llama, intermediate: 48}\n", "job.yaml", "/b")->model == [] {
    ModelConfig want = MakeConfig(2, 32, 4, 256, 16);
    want.family = Family::kLlama;
    want.num_kv_heads = 4;  // HF's default: as many as the heads
    want.head_dim = 8;
    want.intermediate_size = 48;
    return want;
  }());
  CHECK_THAT(ErrorOf(head + "family: llama}\n"), Contains("intermediate: missing required key"));
  CHECK_THAT(ErrorOf(head + "family: llama, intermediate: 48, kv_heads: 3}\n"),
             Contains("model.kv_heads: must divide heads (4)"));
  CHECK_THAT(ErrorOf(head + "kv_heads: 2}\n"), Contains("is a llama key (set family: llama)"));
  CHECK_THAT(ErrorOf(head + "family: falcon}\n"), Contains("unknown model family 'falcon'"));
  CHECK_THAT(ErrorOf(head + "family: llama, intermediate: 48, tied: maybe}\n"),
             Contains("must be true or false"));
  CHECK_THAT(ErrorOf(head + "family: llama, intermediate: 48, head_dim: 7}\n"),
             Contains("head_dim 7 must be even"));
  CHECK_THAT(ErrorOf(head + "family: llama, intermediate: 48, rope_scaling: {factor: 8, "
                            "low_freq_factor: 4, high_freq_factor: 1}}\n"),
             Contains("rope_scaling (llama3)"));
}

TEST_CASE("defaults", "[job]") {
  auto job = ParseJob(kValid, "job.yaml", "/base");
  REQUIRE(job.ok());
  CHECK(job->microbatch_size == 4);
  CHECK(job->seq_len == 16);
  CHECK(job->data.train == "builtin");
  CHECK(job->data.val.empty());
  CHECK(job->checkpoint.dir == "checkpoints/t");
  CHECK(job->backend == "cpu");
  CHECK(job->threads == 0);
  CHECK(job->optimizer.grad_clip == 1.0f);
}

// Token ids are 32-bit: a vocabulary above 65536 (llama-3's 128,256) is a job's to choose,
// up to 2^24, the largest a pipeline's targets frame carries exactly.
TEST_CASE("vocabularies above 16 bits", "[job]") {
  const std::string rest = ", context: 16}\nsteps: 1\nbatch_size: 1\n";
  const std::string head = "name: t\nmodel: {layers: 2, channels: 32, heads: 4, vocab: ";
  auto job = ParseJob(head + "128256" + rest, "job.yaml", "/base");
  REQUIRE(job.ok());
  CHECK(job->model.vocab_size == 128256);
  CHECK(job->model.padded_vocab_size == 128256);
  CHECK(ParseJob(head + "16777216" + rest, "job.yaml", "/base").ok());
  CHECK_THAT(ErrorOf(head + "16777217" + rest), Contains("model.vocab: must be in [1, 16777216]"));
}

TEST_CASE("malformed jobs name file, line, column and key", "[job]") {
  const std::string v = kValid;
  CHECK_THAT(ErrorOf(v + "stpes: 3\n"),
             Contains("job.yaml:5:1: stpes: unknown key 'stpes' (did you mean 'steps'?)"));
  CHECK_THAT(ErrorOf("name: t\nmodel: {layers: 2, channels: 32, heads: 4, vocab: 256, "
                     "context: 16}\nbatch_size: 4\n"),
             Contains("steps: missing required key"));
  CHECK_THAT(ErrorOf(v + "microbatch_size: 3\n"),
             Contains("job.yaml:5:18: microbatch_size: batch_size 4 must be a multiple of "
                      "microbatch_size 3"));
  CHECK_THAT(ErrorOf(v + "optimizer: {schedule: linear}\n"),
             Contains("optimizer.schedule: unknown schedule 'linear'"));
  CHECK_THAT(ErrorOf(v + "optimizer: {lr: -1}\n"), Contains("optimizer.lr: must be in"));
  CHECK_THAT(ErrorOf(v + "optimizer: {beta2: 1}\n"), Contains("optimizer.beta2: must be below 1"));
  CHECK_THAT(ErrorOf(v + "seq_len: 17\n"), Contains("job.yaml:5:10: seq_len: must be in [1, 16]"));
  CHECK_THAT(ErrorOf(v + "steps: 3\n"), Contains("job.yaml:5:1: steps: duplicate key"));
  CHECK_THAT(ErrorOf(v + "backend: tpu\n"), Contains("backend: unknown backend 'tpu'"));
  CHECK_THAT(ErrorOf(v + "steps2: [1\n"), Contains("invalid YAML"));
  CHECK_THAT(ErrorOf(""), Contains("the file is empty"));
  CHECK_THAT(ErrorOf(","), Contains("expected one YAML document, found 16 or more"));
  CHECK_THAT(ErrorOf(v + "# " + std::string(300 << 10, 'x') + "\n"),
             Contains("more than the limit of 262144"));
  CHECK_THAT(ErrorOf("name: t\nsteps: 1\nbatch_size: 1\n"),
             Contains("model: missing required key (give model or init_from)"));
  CHECK_THAT(ErrorOf("name: t\nmodel: {layers: 2, channels: 30, heads: 4, vocab: 256, "
                     "context: 16}\nsteps: 1\nbatch_size: 1\n"),
             Contains("job.yaml:2:41: model.heads: channels (30) must be a multiple of heads"));
  CHECK_THAT(ErrorOf("name: t\nmodel: {layers: two}\nsteps: 1\nbatch_size: 1\n"),
             Contains("model.layers: expected a whole number, got 'two'"));
  CHECK_THAT(ErrorOf(v + "data: {train: missing.bin}\n"),
             Contains("data.train: cannot read data file '/nonexistent/missing.bin'"));
  CHECK_THAT(ErrorOf(v + "data: {format: csv}\n"), Contains("data.format: unknown data format"));
  CHECK_THAT(ErrorOf(v + "data: [1, 2]\n"), Contains("data: expected a map, got a list"));
  CHECK_THAT(ErrorOf("name: a/b\n"), Contains("name: may hold only"));
}

TEST_CASE("init_from is read and checked against model", "[job]") {
  const std::string dir = testing::TempDir("job_init");
  const ModelConfig c = MakeConfig(2, 32, 4, 256, 16);
  std::vector<float> params(NumParameters(c), 0.5f);
  REQUIRE(WriteCheckpoint(dir + "/m.bin", c, params.data()).ok());
  auto job = ParseJob("name: t\ninit_from: m.bin\nsteps: 1\nbatch_size: 1\n", "job.yaml", dir);
  REQUIRE(job.ok());
  CHECK(job->model == c);
  CHECK(job->init_from == dir + "/m.bin");
  CHECK(ParseJob(std::string(kValid) + "init_from: m.bin\n", "job.yaml", dir).ok());
  CHECK_THAT(ErrorOf("name: t\ninit_from: m.bin\nmodel: {layers: 3, channels: 32, heads: 4, "
                     "vocab: 256, context: 16}\nsteps: 1\nbatch_size: 1\n",
                     dir),
             Contains("job.yaml:3:8: model: the model config does not fit checkpoint"));
  CHECK_THAT(ErrorOf("name: t\ninit_from: nope.bin\nsteps: 1\nbatch_size: 1\n", dir),
             Contains("job.yaml:2:12: init_from: cannot read checkpoint"));
}

}  // namespace
}  // namespace longhaul::model
