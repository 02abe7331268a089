// Job helpers for in-process daemon tests; see job_test_util.h.
#include "test/daemon/job_test_util.h"

#include <map>

#include "daemon/job/spec/job_spec.h"
#include "model/job.h"
#include "model/trainer.h"
#include "test/daemon/test_util.h"

namespace longhaul::testing {

StatusOr<std::vector<float>> TrainLocalLosses(const std::string& yaml, int fragments,
                                              const std::string& tied_codec) {
  const std::string dir = TempDir("train-local");
  ASSIGN_OR_RETURN(model::Job job,
                   model::ParseJob(yaml, "job.yaml", dir, daemon::PipelineJobKeys()));
  model::TrainerOptions o;
  o.checkpoint_dir = dir + "/ckpt";
  o.fragments = fragments;
  o.tied_codec = tied_codec;
  ASSIGN_OR_RETURN(auto trainer, model::Trainer::Create(job, o));
  std::vector<float> losses;
  RETURN_IF_ERROR(trainer->Run([&](const model::StepReport& r) { losses.push_back(r.loss); }));
  return losses;
}

StatusOr<std::vector<std::pair<int, float>>> TrainLocalValLosses(const std::string& yaml) {
  const std::string dir = TempDir("train-local-val");
  ASSIGN_OR_RETURN(model::Job job,
                   model::ParseJob(yaml, "job.yaml", dir, daemon::PipelineJobKeys()));
  model::TrainerOptions o;
  o.checkpoint_dir = dir + "/ckpt";
  ASSIGN_OR_RETURN(auto trainer, model::Trainer::Create(job, o));
  std::vector<std::pair<int, float>> val;
  RETURN_IF_ERROR(trainer->Run([&](const model::StepReport& r) {
    if (r.val_loss) val.emplace_back(r.step, *r.val_loss);
  }));
  return val;
}

v1::JobStatus WaitJobEnd(daemon::Daemon& d, const std::string& id, std::chrono::seconds timeout) {
  v1::JobStatus s;
  WaitFor(
      [&] {
        auto r = d.jobs().GetJob(id, 0);
        if (!r.ok()) return false;
        s = *r;
        return s.state() == v1::JOB_STATE_COMPLETED || s.state() == v1::JOB_STATE_FAILED ||
               s.state() == v1::JOB_STATE_CANCELLED;
      },
      timeout);
  return s;
}

StatusOr<model::Checkpoint> ExportedCheckpoint(daemon::Daemon& d, const std::string& id,
                                               const std::string& dir_name) {
  std::string bytes;
  RETURN_IF_ERROR(
      d.jobs().Export(id, "llmc", "", [&](const std::string&, const std::string& b, uint64_t) {
        bytes += b;
        return absl::OkStatus();
      }));
  const std::string path = TempDir(dir_name) + "/model.bin";
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::InternalError("cannot write " + path);
  fwrite(bytes.data(), 1, bytes.size(), f);
  fclose(f);
  return model::ReadCheckpoint(path);
}

StatusOr<std::string> ExportedHfDir(daemon::Daemon& d, const std::string& id,
                                    const std::string& dir_name, const std::string& dtype) {
  const std::string dir = TempDir(dir_name);
  std::map<std::string, std::string> files;
  RETURN_IF_ERROR(d.jobs().Export(id, "hf", dtype,
                                  [&](const std::string& file, const std::string& b, uint64_t) {
                                    files[file] += b;
                                    return absl::OkStatus();
                                  }));
  for (const auto& [name, bytes] : files) {
    const std::string path = dir + "/" + name;
    FILE* f = fopen(path.c_str(), "wb");
    if (f == nullptr) return absl::InternalError("cannot write " + path);
    fwrite(bytes.data(), 1, bytes.size(), f);
    fclose(f);
  }
  return dir;
}

}  // namespace longhaul::testing
