// What a job's `init_from` names, read one way for every caller (train-local, eval and each
// pipeline stage): a Hugging Face model directory (config.json and safetensors, a llama:
// model/hf_checkpoint.h) or a checkpoint file (llm.c's GPT-2 or our llama one:
// model/checkpoint.h). A stage reads only its own layers' tensors from a Hugging Face
// directory; from a checkpoint file it reads the file and keeps its slice.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/chain.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace longhaul::model {

// The model `path` holds (validated).
StatusOr<ModelConfig> ReadInitConfig(const std::string& path);

// `path` opened once for several fragments: the config read and checked once, a checkpoint
// file read once (a Hugging Face directory's shards are opened as their tensors are asked
// for).
class InitSource {
 public:
  static StatusOr<std::unique_ptr<InitSource>> Open(const std::string& path);
  const ModelConfig& config() const { return config_; }
  // Fills `params` (layout.total() floats, the fragment's flat layout), after checking that
  // the source holds the model `layout` is of.
  Status ReadFragment(const FragmentLayout& layout, float* params) const;
  // Every fragment of `chain`.
  Status LoadInto(FragmentChain& chain) const;

 private:
  std::string path_;
  ModelConfig config_;
  std::unique_ptr<HfTensorSource> hf_;  // a Hugging Face directory
  std::vector<float> whole_;            // a checkpoint file's parameters
};

// One fragment from `path` (InitSource::Open, then ReadFragment).
Status ReadInitFragment(const std::string& path, const FragmentLayout& layout, float* params);

}  // namespace longhaul::model
