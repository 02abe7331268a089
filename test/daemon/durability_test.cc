// Durable state under disk faults, through the FileEnv seam (test/daemon/fault_env.h, passed to
// the readers and writers): stage checkpoints and job records are checksummed and verified on load,
// so a flipped byte or a truncated file is refused naming the file; a failed fsync or a full disk
// fails the write and leaves the previous checkpoint as it was. End to end: with the newest
// committed checkpoint corrupt, a restarted job falls back to the one before and completes with the
// same losses; with both corrupt it fails at once, naming the file.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "daemon/daemon.h"
#include "daemon/job/coordinator/job_record.h"
#include "daemon/job/state/stage_checkpoint.h"
#include "test/daemon/fault_env.h"
#include "test/daemon/job_test_util.h"
#include "test/daemon/test_util.h"

namespace longhaul {
namespace {

using namespace std::chrono_literals;
using daemon::ReadStageState;
using daemon::StageState;
using daemon::WriteStageState;
namespace fs = std::filesystem;

StageState MakeState(uint64_t step, size_t n) {
  StageState s;
  s.step = step;
  s.layer_begin = 1;
  s.layer_end = 3;
  for (size_t i = 0; i < n; ++i) {
    s.params.push_back(0.5f * i + step);
    s.m.push_back(0.25f * i);
    s.v.push_back(1.0f + i);
  }
  s.loader_state = "position 42";
  return s;
}

void FlipByteOnDisk(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x01;
  f.seekp(offset);
  f.write(&c, 1);
}

bool NoTempFiles(const std::string& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) return false;
  }
  return true;
}

TEST_CASE("stage checkpoints: every flipped byte and every truncation is refused") {
  const std::string dir = testing::TempDir("ckpt");
  const std::string path = daemon::StageCheckpointPath(dir, 4, 1, 3);
  const StageState s = MakeState(4, 100);
  testing::FaultEnv env;
  REQUIRE(WriteStageState(env, path, s).ok());
  auto back = ReadStageState(env, path, 1, 3);
  REQUIRE(back.ok());
  CHECK(back->params == s.params);
  CHECK(back->v == s.v);
  CHECK(back->loader_state == s.loader_state);

  const int64_t size = static_cast<int64_t>(fs::file_size(path));
  for (int64_t offset = 0; offset < size; offset += 7) {
    env.FlipOnRead(".bin", offset);
    auto r = ReadStageState(env, path, 1, 3);
    INFO("flipped byte " << offset << " of " << size);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains(path));
  }
  env.FlipOnRead("", -1);
  for (int64_t keep : {int64_t{0}, int64_t{10}, size / 2, size - 1}) {
    const std::string cut = dir + "/cut.bin";
    fs::copy_file(path, cut, fs::copy_options::overwrite_existing);
    fs::resize_file(cut, static_cast<uintmax_t>(keep));
    auto r = ReadStageState(env, cut, 1, 3);
    INFO("truncated to " << keep);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kDataLoss);
  }
  // A byte flipped on the disk itself, in the middle of the parameters.
  FlipByteOnDisk(path, size / 2);
  auto r = ReadStageState(env, path, 1, 3);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("checksum mismatch"));
}

TEST_CASE("a failed fsync or a full disk fails the write and keeps the previous checkpoint") {
  const std::string dir = testing::TempDir("ckpt-faults");
  const std::string path = daemon::StageCheckpointPath(dir, 2, 1, 3);
  testing::FaultEnv env;
  REQUIRE(WriteStageState(env, path, MakeState(2, 1000)).ok());

  env.fail_sync = true;
  Status s = WriteStageState(env, path, MakeState(9, 1000));
  CHECK(s.code() == absl::StatusCode::kInternal);
  CHECK_THAT(std::string(s.message()), Catch::Contains("cannot sync"));
  env.fail_sync = false;
  auto kept = ReadStageState(env, path, 1, 3);
  REQUIRE(kept.ok());
  CHECK(kept->step == 2);
  CHECK(NoTempFiles(dir));

  env.space_left = 5000;  // the write tears after 5000 bytes
  s = WriteStageState(env, path, MakeState(9, 1000));
  CHECK(s.code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(s.message()), Catch::Contains("No space left"));
  env.space_left = -1;
  kept = ReadStageState(env, path, 1, 3);
  REQUIRE(kept.ok());
  CHECK(kept->step == 2);
  CHECK(NoTempFiles(dir));
}

TEST_CASE("pruning lists and removes through the env: the two newest kept, a refusal reported") {
  const std::string dir = testing::TempDir("ckpt-prune");
  testing::FaultEnv env;
  for (uint64_t step : {2, 4, 6, 8}) {
    REQUIRE(WriteStageState(env, daemon::StageCheckpointPath(dir, step, 1, 3), MakeState(step, 10))
                .ok());
  }
  std::ofstream(dir + "/sync_4_1-3.bin") << "x";  // a sync state of step 4
  std::ofstream(dir + "/notes.txt") << "kept";    // not ours: never touched

  env.refuse_remove_suffix = daemon::StageCheckpointPath(dir, 2, 1, 3);
  const Status s = daemon::PruneStageStates(env, dir, 6);
  CHECK(s.code() == absl::StatusCode::kPermissionDenied);
  CHECK_THAT(std::string(s.message()), Catch::Contains(daemon::StageCheckpointPath(dir, 2, 1, 3)));
  std::vector<std::string> removed = env.removed;
  std::sort(removed.begin(), removed.end());
  CHECK(removed == std::vector<std::string>{daemon::StageCheckpointPath(dir, 4, 1, 3),
                                            dir + "/sync_4_1-3.bin"});
  CHECK(fs::exists(daemon::StageCheckpointPath(dir, 2, 1, 3)));  // refused: left for next time
  CHECK(fs::exists(daemon::StageCheckpointPath(dir, 6, 1, 3)));
  CHECK(fs::exists(daemon::StageCheckpointPath(dir, 8, 1, 3)));
  CHECK(fs::exists(dir + "/notes.txt"));

  env.refuse_remove_suffix.clear();
  CHECK(daemon::PruneStageStates(env, dir, 6).ok());
  CHECK_FALSE(fs::exists(daemon::StageCheckpointPath(dir, 2, 1, 3)));
  CHECK(fs::exists(daemon::StageCheckpointPath(dir, 6, 1, 3)));
  CHECK(absl::IsNotFound(daemon::PruneStageStates(env, dir + "/none", 6)));
}

TEST_CASE("job records: checksummed, torn or flipped ones are refused, old ones still read") {
  const std::string dir = testing::TempDir("record");
  v1::JobStatus record;
  record.set_job_id("tiny-abc123");
  record.set_state(v1::JOB_STATE_RUNNING);
  record.set_committed_step(6);
  record.add_stages()->set_site("alpha");
  for (int i = 0; i < 50; ++i) record.add_losses(5.0 - 0.01 * i);
  const std::string path = dir + "/job.pb";
  testing::FaultEnv env;
  REQUIRE(daemon::WriteJobRecord(env, path, record).ok());
  auto back = daemon::ReadJobRecord(env, path);
  REQUIRE(back.ok());
  CHECK(back->committed_step() == 6);
  CHECK(back->losses_size() == 50);

  const int64_t size = static_cast<int64_t>(fs::file_size(path));
  for (int64_t offset = 0; offset < size; ++offset) {
    env.FlipOnRead("job.pb", offset);
    INFO("flipped byte " << offset);
    CHECK(daemon::ReadJobRecord(env, path).status().code() == absl::StatusCode::kDataLoss);
  }
  env.FlipOnRead("", -1);
  fs::resize_file(path, static_cast<uintmax_t>(size - 3));
  CHECK(daemon::ReadJobRecord(env, path).status().code() == absl::StatusCode::kDataLoss);

  // A record an earlier build wrote: the bare protobuf.
  std::ofstream(path, std::ios::binary | std::ios::trunc) << record.SerializeAsString();
  back = daemon::ReadJobRecord(env, path);
  REQUIRE(back.ok());
  CHECK(back->job_id() == "tiny-abc123");
}

// ---- end to end ----------------------------------------------------------------------------

std::string JobYaml() {
  return "name: durable\n"
         "model: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}\n"
         "data: {train: builtin}\n"
         "steps: 400\n"
         "batch_size: 4\n"
         "microbatch_size: 2\n"
         "seq_len: 32\n"
         "optimizer: {lr: 3e-3, warmup_steps: 2, weight_decay: 0.1, grad_clip: 1.0}\n"
         "seed: 5\n"
         "checkpoint: {every: 2}\n"
         "backend: cpu\n"
         "threads: 1\n"
         "sites: [alpha, beta]\n"
         "placement: even\n"
         "replan: off\n"
         "compression: {mode: off}\n";
}

struct Pair {
  daemon::SiteConfig alpha, beta;
  std::unique_ptr<daemon::Daemon> a, b;
  void Start() {
    daemon::DaemonOptions o;
    o.token = "durability-token-0123456789";
    auto da = daemon::Daemon::Start(alpha, o);
    REQUIRE(da.ok());
    auto db = daemon::Daemon::Start(beta, o);
    REQUIRE(db.ok());
    a = std::move(*da);
    b = std::move(*db);
  }
  void Stop() {
    b.reset();
    a.reset();
  }
};

Pair MakePair() {
  const int pa = testing::FreePort(), pb = testing::FreePort();
  Pair p;
  p.alpha = testing::MakeSiteConfig({"alpha", pa, {{"beta", pb}}});
  p.beta = testing::MakeSiteConfig({"beta", pb, {{"alpha", pa}}});
  p.alpha.links.probe_interval_seconds = p.beta.links.probe_interval_seconds = 5;
  p.alpha.log_level = p.beta.log_level = "info";
  return p;
}

// Runs the job until at least `steps` are committed, stops both daemons, and returns the job
// id and its record as the coordinator left it on disk.
std::pair<std::string, v1::JobStatus> RunAndStop(Pair& p, uint64_t steps) {
  p.Start();
  v1::SubmitJobRequest req;
  req.set_job_yaml(JobYaml());
  auto r = p.a->jobs().Submit(req);
  REQUIRE(r.ok());
  REQUIRE(testing::WaitFor(
      [&] {
        auto s = p.a->jobs().GetJob(r->job_id(), 1);
        return s.ok() && s->committed_step() >= steps && s->previous_committed_step() > 0;
      },
      60s));
  p.Stop();
  auto record = daemon::ReadJobRecord(*FileEnv::Default(),
                                      p.alpha.data_dir + "/jobs/" + r->job_id() + "/job.pb");
  REQUIRE(record.ok());
  return {r->job_id(), *record};
}

TEST_CASE("a corrupt newest checkpoint: the job resumes from the previous one, same losses") {
  Pair p = MakePair();
  auto [id, record] = RunAndStop(p, 4);
  const uint64_t newest = record.committed_step(), previous = record.previous_committed_step();
  REQUIRE(previous < newest);
  // beta runs layers 1..2: flip a byte in the middle of its newest committed checkpoint.
  const std::string bad =
      daemon::StageCheckpointPath(p.beta.data_dir + "/jobs/" + id, newest, 1, 2);
  REQUIRE(fs::exists(bad));
  FlipByteOnDisk(bad, static_cast<int64_t>(fs::file_size(bad)) / 2);

  p.Start();
  const v1::JobStatus done = testing::WaitJobEnd(*p.a, id, 180s);
  INFO(done.detail());
  REQUIRE(done.state() == v1::JOB_STATE_COMPLETED);

  const auto losses = testing::TrainLocalLosses(JobYaml());
  REQUIRE(losses.ok());
  const std::vector<float>& local = *losses;
  REQUIRE(done.losses_size() == static_cast<int>(local.size()));
  for (size_t i = 0; i < local.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(done.losses(i) == local[i]);
  }
}

TEST_CASE("both kept checkpoints corrupt: the job fails at once, naming the file") {
  Pair p = MakePair();
  auto [id, record] = RunAndStop(p, 4);
  const std::string jobs = p.beta.data_dir + "/jobs/" + id;
  for (uint64_t step : {record.committed_step(), record.previous_committed_step()}) {
    const std::string path = daemon::StageCheckpointPath(jobs, step, 1, 2);
    REQUIRE(fs::exists(path));
    fs::resize_file(path, fs::file_size(path) - 8);  // truncated
  }
  p.Start();
  const v1::JobStatus done = testing::WaitJobEnd(*p.a, id, 180s);
  CHECK(done.state() == v1::JOB_STATE_FAILED);
  CHECK_THAT(done.detail(), Catch::Contains("stage_"));
  CHECK_THAT(done.detail(), Catch::Contains("truncated"));
  CHECK(done.attempt() <= record.attempt() + 3);  // at once, not after 50 retries
}

TEST_CASE("a corrupt job record is listed as failed with the reason") {
  Pair p = MakePair();
  auto [id, record] = RunAndStop(p, 2);
  FlipByteOnDisk(p.alpha.data_dir + "/jobs/" + id + "/job.pb", 30);
  p.Start();
  auto s = p.a->jobs().GetJob(id, 0);
  REQUIRE(s.ok());
  CHECK(s->state() == v1::JOB_STATE_FAILED);
  CHECK_THAT(s->detail(), Catch::Contains("checksum mismatch"));
  bool listed = false;
  const v1::ListJobsResponse jobs = p.a->jobs().ListJobs();
  for (const auto& j : jobs.jobs()) listed = listed || j.job_id() == id;
  CHECK(listed);
}

}  // namespace
}  // namespace longhaul
