// llm.c's GPT-2 checkpoint file: a header of 256 int32 (magic 20240326, version 3, maxT,
// V, L, NH, C, Vp, the rest 0) followed by every parameter as fp32 in llm.c's 16-tensor
// order (model/layout.h). Files written here are read by llm.c and the reverse.
//
// A llama model's checkpoint (what train-local and the stages write between steps; Hugging
// Face's format is the exchange format, model/hf_checkpoint.h) has the same shape with its
// own magic 20261127: maxT, V, L, NH, C, Vp at 2..7, then NKV, HD, I, tied, the RMSNorm
// epsilon (fp32 bits), rope theta and the llama3 rope scaling (fp64 bits, two ints each) and
// its original context, then every parameter as fp32 in the layout of model/layout.h.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/file_io.h"

namespace longhaul::model {

inline constexpr int kCheckpointMagic = 20240326;
inline constexpr int kCheckpointVersion = 3;
inline constexpr int kLlamaCheckpointMagic = 20261127;
inline constexpr int kLlamaCheckpointVersion = 1;

struct Checkpoint {
  ModelConfig config;
  std::vector<float> params;  // NumParameters(config) floats, llm.c layout
};

// Reads only the header: the config of checkpoint `path` (validated).
StatusOr<ModelConfig> ReadCheckpointConfig(const std::string& path);

// Reads a whole checkpoint. Errors name the file and what is wrong: missing, bad magic,
// unsupported version (for example llm.c's bf16 version 5), an invalid config, a size that
// does not match the config (truncated or trailing bytes).
StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

// Writes `params` (NumParameters(config) floats) atomically to `path`.
Status WriteCheckpoint(const std::string& path, const ModelConfig& config, const float* params);
// The same bytes to `sink` (an export streamed with no file in between), and their count.
Status WriteCheckpointTo(ByteSink& sink, const ModelConfig& config, const float* params);
int64_t CheckpointBytes(const ModelConfig& config);

// OK when `expected` (from a job) and `actual` (from a checkpoint) describe the same model;
// otherwise an error listing every field that differs.
Status CheckConfigMatches(const ModelConfig& expected, const ModelConfig& actual,
                          const std::string& checkpoint_path);

}  // namespace longhaul::model
