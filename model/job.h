// A training job file (YAML): the one schema for `longhaul train-local` and for distributed
// jobs. A relative path (init_from, data.train, data.val, checkpoint.dir) is relative to the
// job file's folder, in train-local, plan and submit alike: submit sends it absolute
// (job_file_paths.h) and each site reads that path, inside its data_roots; a daemon refuses
// a relative path from any other client. Example (configs/job.example.yaml):
//
//   name: tiny                       # [A-Za-z0-9._-]+
//   model: {layers: 2, channels: 64, heads: 4, vocab: 256, context: 64}
//   #                                # (vocab: up to 2^24, what targets frames carry exactly)
//   #   residual_subspace: 32        # optional: K > 0 is the subspace-cut variant, whose
//   #                                # pipeline cuts carry K floats per position (subspace.h)
//   #   unconstrained_layers: 1      # optional: the last F layers write the full stream
//   #                                # (cuts after layer L - F carry C floats)
//   #   family: llama                # gpt2 (default: llm.c's GPT-2) or llama (Hugging Face's
//   #                                # LlamaForCausalLM); llama's keys, HF's names in brackets:
//   #   kv_heads: 2                  # [num_key_value_heads] divides heads; default heads
//   #   head_dim: 64                 # [head_dim] default channels / heads
//   #   intermediate: 1376           # [intermediate_size] SwiGLU width; required for llama
//   #   norm_eps: 1e-5               # [rms_norm_eps]
//   #   rope_theta: 500000           # [rope_theta] default 10000
//   #   rope_scaling: {factor: 8, low_freq_factor: 1, high_freq_factor: 4,
//   #                  original_context: 8192}   # [rope_scaling, rope_type llama3]
//   #   tied: false                  # [tie_word_embeddings] default true
//   # init_from: gpt2_124M.bin       # instead of (or checked against) model
//   data:
//     train: builtin                 # or a path: llm.c token file, text (bytes), or a token
//                                    # manifest (`longhaul data prepare`'s manifest.json or
//                                    # its folder), or a mixture of manifests:
//                                    #   [{manifest: a/, weight: 0.7}, {manifest: b/, weight: 0.3}]
//     format: auto                   # auto | llmc (uint16 or uint32 ids) | text (not manifests)
//     val: builtin                   # optional; evaluated every val_every steps and at the end
//                                    # (a manifest: its val split)
//     val_every: 50                  # optional, 0 = only at the end
//     val_batches: 8                 # optional
//   steps: 200
//   batch_size: 16                   # sequences per step
//   microbatch_size: 8               # batch_size must be a multiple (default batch_size)
//   seq_len: 64                      # default: the model's context
//   optimizer: {lr: 1e-3, warmup_steps: 10, schedule: cosine, min_lr_fraction: 0.1,
//               weight_decay: 0.1, beta1: 0.9, beta2: 0.95, eps: 1e-8, grad_clip: 1.0}
//   seed: 1
//   checkpoint: {every: 100, dir: checkpoints/tiny}   # default dir: ./checkpoints/NAME
//   backend: cpu                     # cpu | cpu-ref | cuda | cuda-bf16 (train-local's; in
//                                    # daemons each site's devices pick CPU or GPU, and this
//                                    # picks cpu-ref or bf16 compute there: site_backend.h)
//   threads: 2                       # 0 = all cores
//
// A distributed job adds its pipeline keys (sites, replicas, ...: daemon/job/spec/job_spec.h,
// whose table of key parsers names them) to the same file; train-local accepts and ignores
// them when its caller passes their names (LoadJob's more_keys).
//
// Errors read "FILE:LINE:COLUMN: key.path: problem".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status.h"
#include "model/config.h"
#include "model/optimizer.h"
#include "model/token_data.h"

namespace longhaul::model {

// The data source keyword for the built-in corpus.
inline constexpr char kBuiltinData[] = "builtin";

// One source of a data mixture: a token manifest and its share of the windows.
struct DataSource {
  std::string manifest;  // absolute path (manifest.json or its folder)
  double weight = 1;
};

struct JobData {
  std::string train = kBuiltinData;  // "builtin" or an absolute path; "" for a mixture
  std::vector<DataSource> mixture;   // data.train as a list of manifests
  DataFormat format = DataFormat::kAuto;
  std::string val;  // "" (none), "builtin" or an absolute path
  int val_every = 0;
  int val_batches = 8;
};

struct JobCheckpoint {
  int every = 0;    // steps between checkpoints; 0: only the final one
  std::string dir;  // absolute, or relative to the working directory when defaulted
};

struct Job {
  std::string source;  // the job file
  std::string name;
  ModelConfig model;      // from `model`, or from init_from's header
  std::string init_from;  // checkpoint to start from; "" = initialise from seed
  JobData data;
  int steps = 0;
  int batch_size = 0;
  int microbatch_size = 0;
  int seq_len = 0;
  OptimizerOptions optimizer;
  uint64_t seed = 0;
  JobCheckpoint checkpoint;
  std::string backend = "cpu";
  int threads = 0;

  int microbatches() const { return batch_size / microbatch_size; }
};

// Parses job file `path`. `more_keys`: top-level keys accepted besides the ones above, and
// ignored: the pipeline keys a distributed job adds (daemon::PipelineJobKeys(), which
// train-local and the tools that read job files pass); any other key is refused, naming it.
StatusOr<Job> LoadJob(const std::string& path, absl::Span<const absl::string_view> more_keys = {});
// Parses `text`; `source` names it in errors, `base_dir` anchors relative paths.
StatusOr<Job> ParseJob(const std::string& text, const std::string& source,
                       const std::string& base_dir,
                       absl::Span<const absl::string_view> more_keys = {});

}  // namespace longhaul::model
