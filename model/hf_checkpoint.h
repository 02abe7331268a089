// Hugging Face model directories, in and out with no conversion step: config.json <->
// ModelConfig (hf_config.cc), and a fragment's parameters read from and written to HF's
// tensor names. Our layout stacks what HF keeps apart and pads the vocabulary to Vp; the
// mapping splits and trims on the way out and joins on the way in.
//
// llama (LlamaForCausalLM):
//   model.embed_tokens.weight                      (V, C)       wte rows [0, V)
//   model.layers.N.input_layernorm.weight          (C)          ln1w
//   model.layers.N.self_attn.{q,k,v}_proj.weight   (NH HD, C), (NKV HD, C) x2: qkvw rows
//   model.layers.N.self_attn.o_proj.weight         (C, NH HD)   attprojw
//   model.layers.N.post_attention_layernorm.weight (C)          ln2w
//   model.layers.N.mlp.{gate,up}_proj.weight       (I, C) x2    fcw rows
//   model.layers.N.mlp.down_proj.weight            (C, I)       fcprojw
//   model.norm.weight                              (C)          lnfw
//   lm_head.weight                                 (V, C)       head (untied only)
// gpt2 (GPT2LMHeadModel; its Conv1D weights are stored (in, out), ours (out, in)):
//   transformer.wte.weight (V, C), transformer.wpe.weight (maxT, C),
//   transformer.h.N.{ln_1,ln_2}.{weight,bias}, transformer.h.N.attn.c_attn.{weight (C, 3C),
//   bias}, .attn.c_proj.{weight (C, C), bias}, .mlp.c_fc.{weight (C, 4C), bias},
//   .mlp.c_proj.{weight (4C, C), bias}, transformer.ln_f.{weight,bias}; the head is wte.
//
// A checkpoint directory is hostile input: config.json is parsed as untrusted JSON and
// checked like any config; every tensor's presence, dtype and shape is checked against the
// config before it is read, and errors name the directory and the tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace longhaul::model {

// dir/config.json as a ModelConfig: model_type llama (rope_scaling null or llama3, silu, no
// biases) or gpt2 (tanh GELU, epsilon 1e-5, tied). Vp is V padded to 128.
StatusOr<ModelConfig> ReadHfConfig(const std::string& dir);
// config.json's text for `config`, with torch_dtype naming `dtype`.
std::string HfConfigJson(const ModelConfig& config, StDtype dtype);

// True when `path` is a directory holding config.json (a Hugging Face model directory).
bool IsHfModelDir(const std::string& path);

// Reads the tensors `layout` holds (and only those) from `source` into `params`
// (layout.total() floats, the fragment's flat layout); padded vocabulary rows are zero.
Status ReadHfFragment(const HfTensorSource& source, const std::string& dir,
                      const FragmentLayout& layout, float* params);

// The Hugging Face tensors of one fragment, ready to write: `tensors()` point into the
// fragment's parameters or into copies this object owns (transposed GPT-2 weights). The tied
// embedding's copy in a last fragment is left out: the first fragment's is the one. A
// subspace-cut GPT-2 has no Hugging Face form (refused).
class HfFragmentTensors {
 public:
  // `params` (layout.total() floats) must outlive the object.
  static StatusOr<std::unique_ptr<HfFragmentTensors>> Of(const FragmentLayout& layout,
                                                         const float* params, StDtype dtype);
  const std::vector<StTensor>& tensors() const { return tensors_; }
  int64_t bytes() const { return bytes_; }  // of tensor data, in `dtype`

 private:
  std::vector<StTensor> tensors_;
  std::vector<std::vector<float>> owned_;
  int64_t bytes_ = 0;
};

// "model-0000K-of-0000N.safetensors" (K from 1), or "model.safetensors" when N == 1.
std::string HfShardName(int k, int n);

// After the shards: model.safetensors.index.json (when there is more than one: `shards`
// gives each file's tensor names) and config.json, atomically.
Status WriteHfIndexAndConfig(
    const std::string& dir, const ModelConfig& config, StDtype dtype,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& shards,
    int64_t total_bytes);

struct HfWriteOptions {
  StDtype dtype = StDtype::kF32;
  // Shards of at most this many bytes of tensor data (a tensor is never split); the index
  // is written when there is more than one.
  int64_t max_shard_bytes = int64_t(5) << 30;
};

// Writes a whole model (`params`: NumParameters(config) floats, the layout of model/layout.h)
// to `dir` (created if missing) as config.json plus model.safetensors, or shards
// model-0000K-of-0000N.safetensors with model.safetensors.index.json. Each file is written
// atomically.
Status WriteHfCheckpoint(const std::string& dir, const ModelConfig& config, const float* params,
                         const HfWriteOptions& options = {});

}  // namespace longhaul::model
