// Hugging Face model directories for the llama family, in and out with no conversion step:
// config.json <-> ModelConfig (LlamaForCausalLM's keys), and a fragment's parameters read
// from and written to HF's tensor names. Our layout stacks what HF keeps apart (q, k and v
// projections in qkvw; gate and up in fcw: model/layout.h) and pads the vocabulary to Vp;
// the mapping below splits and trims them on the way out and joins them on the way in.
//
//   model.embed_tokens.weight                      (V, C)       wte rows [0, V)
//   model.layers.N.input_layernorm.weight          (C)          ln1w
//   model.layers.N.self_attn.{q,k,v}_proj.weight   (NH HD, C), (NKV HD, C) x2: qkvw rows
//   model.layers.N.self_attn.o_proj.weight         (C, NH HD)   attprojw
//   model.layers.N.post_attention_layernorm.weight (C)          ln2w
//   model.layers.N.mlp.{gate,up}_proj.weight       (I, C) x2    fcw rows
//   model.layers.N.mlp.down_proj.weight            (C, I)       fcprojw
//   model.norm.weight                              (C)          lnfw
//   lm_head.weight                                 (V, C)       head (untied only)
//
// A checkpoint directory is hostile input: config.json is parsed as untrusted JSON and
// checked like any config; every tensor's presence, dtype and shape is checked against the
// config before it is read, and errors name the directory and the tensor.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/safetensors.h"

namespace longhaul::model {

// dir/config.json as a llama ModelConfig (model_type "llama"; rope_scaling null or of type
// llama3; hidden_act silu; no attention or MLP biases). Vp is V padded to 128.
StatusOr<ModelConfig> ReadHfConfig(const std::string& dir);
// config.json's text for `config` (family llama), with torch_dtype naming `dtype`.
std::string HfConfigJson(const ModelConfig& config, StDtype dtype);

// True when `path` is a directory holding config.json (a Hugging Face model directory).
bool IsHfModelDir(const std::string& path);

// Reads the tensors `layout` holds (and only those) from `source` into `params`
// (layout.total() floats, the fragment's flat layout); padded vocabulary rows are zero.
Status ReadHfFragment(const HfTensorSource& source, const std::string& dir,
                      const FragmentLayout& layout, float* params);

struct HfWriteOptions {
  StDtype dtype = StDtype::kF32;
  // Shards of at most this many bytes of tensor data (a tensor is never split); the index
  // is written when there is more than one.
  int64_t max_shard_bytes = int64_t(5) << 30;
};

// Writes a whole model (`params`: NumParameters(config) floats, the layout of model/layout.h)
// to `dir` (created if missing) as config.json plus model.safetensors, or shards
// model-0000K-of-0000N.safetensors with model.safetensors.index.json. Each file is written
// atomically; files of an earlier export in `dir` that this one does not write are left.
Status WriteHfCheckpoint(const std::string& dir, const ModelConfig& config, const float* params,
                         const HfWriteOptions& options = {});

}  // namespace longhaul::model
