// What a job's `init_from` names, read one way for every caller (train-local, eval and each
// pipeline stage): a Hugging Face model directory (config.json and safetensors, a llama:
// model/hf_checkpoint.h) or a checkpoint file (llm.c's GPT-2 or our llama one:
// model/checkpoint.h). A stage reads only its own layers' tensors from a Hugging Face
// directory; from a checkpoint file it reads the file and keeps its slice.
#pragma once

#include <string>

#include "common/status.h"
#include "model/config.h"
#include "model/layout.h"

namespace longhaul::model {

// The model `path` holds (validated).
StatusOr<ModelConfig> ReadInitConfig(const std::string& path);

// Fills `params` (layout.total() floats, the fragment's flat layout) from `path`, after
// checking that it holds the model `layout` is of.
Status ReadInitFragment(const std::string& path, const FragmentLayout& layout, float* params);

}  // namespace longhaul::model
