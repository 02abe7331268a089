// Thin CLI wrappers over model/evaluate.h, model/trainer.h and the checkpoint formats
// (model/init_from.h, model/hf_checkpoint.h): parse flags, print results.
// train-local prints one line per step; on a terminal it also keeps a progress bar with an
// ETA on the last line.
#include "tools/cli/model_commands.h"

#include <unistd.h>

#include <array>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "daemon/job/spec/job_spec.h"
#include "model/checkpoint.h"
#include "model/evaluate.h"
#include "model/hf_checkpoint.h"
#include "model/init_from.h"
#include "model/job.h"
#include "model/train_state.h"
#include "model/trainer.h"
#include "tools/cli/client.h"
#include "tools/cli/format.h"

namespace longhaul::cli {
namespace {

struct EvalFlags {
  model::EvalOptions options;
  std::string format = "auto";
};

int Fail(const Status& status) {
  std::cerr << "longhaul: " << status.message() << "\n";
  return absl::IsInvalidArgument(status) ? kExitUsage : kExitError;
}

int Eval(EvalFlags flags) {
  auto format = model::ParseDataFormat(flags.format);
  if (!format.ok()) return Fail(format.status());
  flags.options.format = *format;
  auto result = model::EvaluateCheckpoint(flags.options);
  if (!result.ok()) return Fail(result.status());
  std::cout << absl::StrFormat(
      "mean loss %.6f over %d batches of %d x %d tokens (model %s, data %d tokens)\n",
      result->mean_loss, result->batches, result->batch_size, result->seq_len,
      result->config.DebugString(), result->data_tokens);
  return kExitOk;
}

// Converts `in` (a checkpoint file or a Hugging Face directory) to `out`: a Hugging Face
// directory (format hf, dtype f32 or bf16) or a checkpoint file (format llmc).
Status ConvertCheckpoint(const std::string& in, const std::string& out, const std::string& format,
                         const std::string& dtype) {
  ASSIGN_OR_RETURN(const auto source, model::InitSource::Open(in));
  const model::ModelConfig& config = source->config();
  const model::FragmentLayout whole(config, 0, config.num_layers);
  std::vector<float> params(whole.total());
  RETURN_IF_ERROR(source->ReadFragment(whole, params.data()));
  if (format == "hf") {
    model::HfWriteOptions o;
    o.dtype = dtype == "bf16" ? model::StDtype::kBF16 : model::StDtype::kF32;
    RETURN_IF_ERROR(model::WriteHfCheckpoint(out, config, params.data(), o));
  } else {
    RETURN_IF_ERROR(model::WriteCheckpoint(out, config, params.data()));
  }
  std::cout << "wrote " << out << " ("
            << (format == "hf" ? "Hugging Face model directory" : "checkpoint") << ", "
            << config.DebugString() << ")\n";
  return absl::OkStatus();
}

std::string Count(double n) {
  if (n >= 1e9) return absl::StrFormat("%.2fG", n / 1e9);
  if (n >= 1e6) return absl::StrFormat("%.2fM", n / 1e6);
  if (n >= 1e3) return absl::StrFormat("%.1fk", n / 1e3);
  return absl::StrFormat("%.0f", n);
}

std::string Bar(int done, int total, int width) {
  const int filled = total > 0 ? int(double(done) / total * width) : width;
  return std::string(filled, '#') + std::string(width - filled, '.');
}

struct ExportFlags {
  std::string dir;  // train-local --export-hf
  std::string dtype = "f32";
};

int TrainLocal(const std::string& job_path, const model::TrainerOptions& options,
               const ExportFlags& export_flags) {
  auto job = model::LoadJob(job_path, daemon::PipelineJobKeys());
  if (!job.ok()) return Fail(job.status());
  // A fresh run into a directory that holds another run's checkpoints would overwrite them
  // step by step: refuse unless resuming.
  const std::string dir =
      options.checkpoint_dir.empty() ? job->checkpoint.dir : options.checkpoint_dir;
  if (const int step = model::LatestCheckpointStep(dir); step > 0 && !options.resume) {
    std::cerr << "longhaul: checkpoint directory " << dir
              << " already holds checkpoints (up to step " << step
              << "): pass --resume to continue that run, or --checkpoint-dir DIR (or "
              << "remove it) to start afresh\n";
    return kExitUsage;
  }
  auto trainer = model::Trainer::Create(*job, options);
  if (!trainer.ok()) return Fail(trainer.status());
  const model::Job& j = (*trainer)->job();
  std::cout << "job " << j.name << ": " << j.model.DebugString() << ", "
            << Count(double(model::NumParameters(j.model))) << " parameters, " << options.fragments
            << (options.fragments == 1 ? " fragment" : " fragments") << ", backend "
            << (*trainer)->backend() << "\n"
            << "data " << j.data.train << " (" << Count(double((*trainer)->train_tokens()))
            << " tokens); " << j.steps << " steps of " << j.batch_size << " x " << j.seq_len
            << " tokens in " << j.microbatches() << " microbatches of " << j.microbatch_size << "\n"
            << "memory: " << (*trainer)->memory().DebugString() << "\n"
            << "checkpoints: " << (*trainer)->checkpoint_dir() << "\n";
  if ((*trainer)->start_step() > 0) {
    std::cout << "resuming after step " << (*trainer)->start_step() << "\n";
  } else if (options.resume) {
    std::cout << "no checkpoint to resume from; starting at step 0\n";
  }
  std::cout.flush();
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  std::string last_checkpoint;
  Status status = (*trainer)->Run([&](const model::StepReport& r) {
    std::string line =
        absl::StrFormat("step %*d/%d  loss %.4f  lr %.2e  norm %.3f  %s tok/s  %.0f ms",
                        int(std::to_string(r.steps).size()), r.step, r.steps, r.loss, r.lr,
                        r.grad_norm, Count(r.tokens_per_second), r.step_seconds * 1e3);
    if (r.val_loss) absl::StrAppendFormat(&line, "  val loss %.4f", *r.val_loss);
    if (!r.checkpoint.empty()) {
      absl::StrAppend(&line, "  saved ", r.checkpoint);
      last_checkpoint = r.checkpoint;
    }
    if (!tty) {
      std::cout << line << std::endl;
      return;
    }
    const int done = r.step - (*trainer)->start_step();
    const double eta = r.elapsed_seconds / std::max(done, 1) * (r.steps - r.step);
    std::cout << "\r\033[K" << line << "\n"
              << "[" << Bar(r.step, r.steps, 30) << "] " << r.step << "/" << r.steps << "  ETA "
              << (r.step == r.steps ? std::string("done") : FormatDuration(eta)) << std::flush;
    if (r.step == r.steps) std::cout << "\n";
  });
  if (!status.ok()) {
    if (tty) std::cout << "\n";
    return Fail(status);
  }
  if (!last_checkpoint.empty()) std::cout << "final checkpoint " << last_checkpoint << "\n";
  if (!export_flags.dir.empty()) {
    if (last_checkpoint.empty()) {
      std::cerr << "longhaul: --export-hf: no final checkpoint was written\n";
      return kExitError;
    }
    const Status exported =
        ConvertCheckpoint(last_checkpoint, export_flags.dir, "hf", export_flags.dtype);
    if (!exported.ok()) return Fail(exported);
  }
  return kExitOk;
}

}  // namespace

void AddModelCommands(CLI::App& app, int* exit_code) {
  auto eval_flags = std::make_shared<EvalFlags>();
  model::EvalOptions& eo = eval_flags->options;
  auto* eval = app.add_subcommand("eval", "Print the mean loss of a checkpoint on a data file");
  eval->add_option("--checkpoint", eo.checkpoint,
                   "Checkpoint file (model.bin: llm.c GPT-2 or our llama) or a Hugging Face model "
                   "directory (config.json + safetensors)")
      ->required();
  eval->add_option("--data", eo.data,
                   "llm.c token file (uint16 or uint32 ids), text read as bytes, or builtin "
                   "(the built-in corpus's validation text)")
      ->required();
  eval->add_option("--format", eval_flags->format, "Data format")
      ->check(CLI::IsMember({"auto", "llmc", "text"}))
      ->capture_default_str();
  eval->add_option("--batches", eo.batches, "Batches to evaluate (0: the whole file)")
      ->capture_default_str();
  eval->add_option("--batch-size", eo.batch_size, "Sequences per batch")->capture_default_str();
  eval->add_option("--seq-len", eo.seq_len, "Tokens per sequence (0: the model's context)")
      ->capture_default_str();
  eval->add_option("--backend", eo.backend,
                   "Kernel backend: cpu, cpu-ref, cuda or cuda-bf16 (cuda:N for GPU N)")
      ->capture_default_str();
  eval->add_option("--threads", eo.threads, "CPU threads (0: all cores)")->capture_default_str();
  eval->callback([eval_flags, exit_code] { *exit_code = Eval(*eval_flags); });

  auto job_path = std::make_shared<std::string>();
  auto options = std::make_shared<model::TrainerOptions>();
  auto* train = app.add_subcommand("train-local", "Train a job (YAML) in this process");
  train->add_option("job", *job_path, "Job file, e.g. configs/job.example.yaml")->required();
  train
      ->add_option("--fragments", options->fragments,
                   "Train the model as this many chained fragments (same losses)")
      ->capture_default_str();
  train->add_option("--backend", options->backend, "Override the job's kernel backend");
  train->add_option("--threads", options->threads, "Override the job's CPU threads");
  train->add_option("--checkpoint-dir", options->checkpoint_dir,
                    "Override the job's checkpoint directory");
  train->add_flag("--resume", options->resume,
                  "Continue from the latest checkpoint in the checkpoint directory");
  auto export_flags = std::make_shared<ExportFlags>();
  train->add_option("--export-hf", export_flags->dir,
                    "After training, write the final model as a Hugging Face directory here");
  train->add_option("--export-dtype", export_flags->dtype, "f32 or bf16 for --export-hf")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  train->callback([job_path, options, export_flags, exit_code] {
    *exit_code = TrainLocal(*job_path, *options, *export_flags);
  });

  auto convert_args = std::make_shared<std::array<std::string, 4>>();
  (*convert_args)[2] = "hf";
  (*convert_args)[3] = "f32";
  auto* convert = app.add_subcommand(
      "convert",
      "Convert a checkpoint: a checkpoint file (llm.c GPT-2, our llama) to a Hugging Face "
      "directory that transformers loads, or a Hugging Face directory to a checkpoint file");
  convert->add_option("in", (*convert_args)[0], "Checkpoint file or Hugging Face directory")
      ->required();
  convert->add_option("out", (*convert_args)[1], "Output directory (hf) or file (llmc)")
      ->required();
  convert->add_option("--format", (*convert_args)[2], "hf or llmc")
      ->check(CLI::IsMember({"hf", "llmc"}))
      ->capture_default_str();
  convert->add_option("--dtype", (*convert_args)[3], "hf: f32 or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
  convert->callback([convert_args, exit_code] {
    const auto& a = *convert_args;
    const Status s = ConvertCheckpoint(a[0], a[1], a[2], a[3]);
    *exit_code = s.ok() ? kExitOk : Fail(s);
  });
}

}  // namespace longhaul::cli
