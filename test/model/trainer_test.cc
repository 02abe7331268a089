// The single-process trainer: loss falls on the built-in corpus, K fragments give the same
// losses and checkpoint bytes, a resumed run continues exactly, and bad data is refused.
#include "model/trainer.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "model/job.h"
#include "model/train_state.h"
#include "test/model/test_util.h"

namespace longhaul::model {
namespace {

using Catch::Matchers::Contains;

Job TinyJob(const std::string& dir) {
  auto job = ParseJob(R"(name: tiny
model: {layers: 2, channels: 32, heads: 4, vocab: 256, context: 32}
data: {train: builtin, val: builtin, val_every: 10, val_batches: 2}
steps: 30
batch_size: 8
microbatch_size: 4
seq_len: 32
optimizer: {lr: 3e-3, warmup_steps: 5, weight_decay: 0.1, grad_clip: 1.0}
checkpoint: {every: 10, dir: ck}
threads: 1
)",
                      "tiny.yaml", dir);
  REQUIRE(job.ok());
  return *job;
}

std::vector<float> Train(const Job& job, TrainerOptions options, int* val_reports = nullptr) {
  auto trainer = Trainer::Create(job, options);
  REQUIRE(trainer.ok());
  std::vector<float> losses;
  REQUIRE((*trainer)
              ->Run([&](const StepReport& r) {
                losses.push_back(r.loss);
                if (val_reports != nullptr && r.val_loss) ++*val_reports;
              })
              .ok());
  return losses;
}

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("training, fragments, checkpoints and resume", "[trainer]") {
  const std::string dir = testing::TempDir("trainer");
  const Job job = TinyJob(dir);
  int vals = 0;
  const std::vector<float> whole = Train(job, {}, &vals);
  REQUIRE(whole.size() == 30);
  CHECK(whole.back() < whole.front() - 1.0f);  // loss visibly falls
  CHECK(vals == 3);
  const std::string final_ckpt = ModelCheckpointPath(dir + "/ck", 30);
  const std::string whole_bytes = Bytes(final_ckpt);
  CHECK(whole_bytes.size() > 1024);
  CHECK(LatestCheckpointStep(dir + "/ck") == 30);

  TrainerOptions two;
  two.fragments = 2;
  two.checkpoint_dir = dir + "/ck2";
  CHECK(Train(job, two) == whole);
  CHECK(Bytes(ModelCheckpointPath(dir + "/ck2", 30)) == whole_bytes);

  // Drop the last two checkpoints and resume from step 10.
  for (int step : {20, 30}) {
    std::remove(ModelCheckpointPath(dir + "/ck", step).c_str());
    std::remove(TrainStatePath(dir + "/ck", step).c_str());
  }
  TrainerOptions resume;
  resume.resume = true;
  auto trainer = Trainer::Create(job, resume);
  REQUIRE(trainer.ok());
  CHECK((*trainer)->start_step() == 10);
  std::vector<float> rest;
  REQUIRE((*trainer)->Run([&](const StepReport& r) { rest.push_back(r.loss); }).ok());
  CHECK(rest == std::vector<float>(whole.begin() + 10, whole.end()));
  CHECK(Bytes(final_ckpt) == whole_bytes);
}

TEST_CASE("the trainer refuses data outside the vocabulary", "[trainer]") {
  const std::string dir = testing::TempDir("trainer_bad");
  testing::WriteBytes(dir + "/text.txt", std::string(4096, 'z'));
  auto job = ParseJob(R"(name: t
model: {layers: 1, channels: 16, heads: 2, vocab: 100, context: 8}
data: {train: text.txt}
steps: 1
batch_size: 1
)",
                      "t.yaml", dir);
  REQUIRE(job.ok());
  auto trainer = Trainer::Create(*job, {});
  REQUIRE(!trainer.ok());
  CHECK_THAT(std::string(trainer.status().message()),
             Contains("t.yaml: data.train: data '" + dir + "/text.txt' holds token 122"));
  TrainerOptions too_many;
  too_many.fragments = 2;
  job->data.train = "builtin";
  job->model = MakeConfig(1, 16, 2, 256, 8);
  CHECK_THAT(std::string(Trainer::Create(*job, too_many).status().message()),
             Contains("cannot split 1 layers into 2 fragments"));
}

}  // namespace
}  // namespace longhaul::model
