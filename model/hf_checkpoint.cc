// Hugging Face tensors of a fragment, read and written (see hf_checkpoint.h).
#include "model/hf_checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/file_io.h"

namespace longhaul::model {
namespace {

namespace fs = std::filesystem;

// One HF tensor inside one of our slices: its name, its shape in the file, where it starts
// (floats from the start of the slice), and whether the file holds it transposed ((in, out),
// GPT-2's Conv1D) against our (out, in).
struct Piece {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  bool transposed = false;
};

std::string LlamaLayer(int l, const char* rest) {
  return absl::StrCat("model.layers.", l, ".", rest);
}
std::string Gpt2Layer(int l, const char* rest) {
  return absl::StrCat("transformer.h.", l, ".", rest);
}

std::vector<Piece> LlamaPieces(const ModelConfig& c, Tensor t, int l) {
  const int64_t C = c.channels, V = c.vocab_size, I = c.intermediate_size;
  const int64_t q = int64_t(c.num_heads) * c.head_dim, kv = int64_t(c.num_kv_heads) * c.head_dim;
  switch (t) {
    case Tensor::kWte:
      return {{"model.embed_tokens.weight", {V, C}}};
    case Tensor::kLn1w:
      return {{LlamaLayer(l, "input_layernorm.weight"), {C}}};
    case Tensor::kQkvw:
      return {{LlamaLayer(l, "self_attn.q_proj.weight"), {q, C}, 0},
              {LlamaLayer(l, "self_attn.k_proj.weight"), {kv, C}, q * C},
              {LlamaLayer(l, "self_attn.v_proj.weight"), {kv, C}, (q + kv) * C}};
    case Tensor::kAttprojw:
      return {{LlamaLayer(l, "self_attn.o_proj.weight"), {C, q}}};
    case Tensor::kLn2w:
      return {{LlamaLayer(l, "post_attention_layernorm.weight"), {C}}};
    case Tensor::kFcw:
      return {{LlamaLayer(l, "mlp.gate_proj.weight"), {I, C}, 0},
              {LlamaLayer(l, "mlp.up_proj.weight"), {I, C}, I * C}};
    case Tensor::kFcprojw:
      return {{LlamaLayer(l, "mlp.down_proj.weight"), {C, I}}};
    case Tensor::kLnfw:
      return {{"model.norm.weight", {C}}};
    case Tensor::kHead:
      return {{"lm_head.weight", {V, C}}};
    default:
      return {};
  }
}

std::vector<Piece> Gpt2Pieces(const ModelConfig& c, Tensor t, int l) {
  const int64_t C = c.channels, V = c.vocab_size;
  switch (t) {
    case Tensor::kWte:
      return {{"transformer.wte.weight", {V, C}}};
    case Tensor::kWpe:
      return {{"transformer.wpe.weight", {c.max_seq_len, C}}};
    case Tensor::kLn1w:
      return {{Gpt2Layer(l, "ln_1.weight"), {C}}};
    case Tensor::kLn1b:
      return {{Gpt2Layer(l, "ln_1.bias"), {C}}};
    case Tensor::kQkvw:
      return {{Gpt2Layer(l, "attn.c_attn.weight"), {C, 3 * C}, 0, true}};
    case Tensor::kQkvb:
      return {{Gpt2Layer(l, "attn.c_attn.bias"), {3 * C}}};
    case Tensor::kAttprojw:
      return {{Gpt2Layer(l, "attn.c_proj.weight"), {C, C}, 0, true}};
    case Tensor::kAttprojb:
      return {{Gpt2Layer(l, "attn.c_proj.bias"), {C}}};
    case Tensor::kLn2w:
      return {{Gpt2Layer(l, "ln_2.weight"), {C}}};
    case Tensor::kLn2b:
      return {{Gpt2Layer(l, "ln_2.bias"), {C}}};
    case Tensor::kFcw:
      return {{Gpt2Layer(l, "mlp.c_fc.weight"), {C, 4 * C}, 0, true}};
    case Tensor::kFcb:
      return {{Gpt2Layer(l, "mlp.c_fc.bias"), {4 * C}}};
    case Tensor::kFcprojw:
      return {{Gpt2Layer(l, "mlp.c_proj.weight"), {4 * C, C}, 0, true}};
    case Tensor::kFcprojb:
      return {{Gpt2Layer(l, "mlp.c_proj.bias"), {C}}};
    case Tensor::kLnfw:
      return {{"transformer.ln_f.weight", {C}}};
    case Tensor::kLnfb:
      return {{"transformer.ln_f.bias", {C}}};
    default:
      return {};
  }
}

// The HF tensors of slice (t, layer); none for the slots a family leaves empty.
std::vector<Piece> Pieces(const ModelConfig& c, Tensor t, int l) {
  return c.family == Family::kLlama ? LlamaPieces(c, t, l) : Gpt2Pieces(c, t, l);
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// (rows, cols) row-major `in` into (cols, rows) row-major `out`.
void Transpose(const float* in, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < cols; ++k) out[k * rows + r] = in[r * cols + k];
  }
}

Status CheckExportable(const ModelConfig& c) {
  if (Subspace(c)) {
    return absl::InvalidArgumentError(
        "the subspace-cut variant of GPT-2 has no Hugging Face form (export it as an llm.c-style "
        "checkpoint)");
  }
  return absl::OkStatus();
}

// Slices of `layout` in the order transformers writes them: embeddings, each layer's
// tensors, the final norm, the head.
template <typename F>
void ForEachSlice(const FragmentLayout& layout, F f) {
  for (Tensor t : {Tensor::kWte, Tensor::kWpe}) {
    if (layout.has(t)) f(t, 0, layout.offset(t), layout.size(t));
  }
  for (int l = layout.begin(); l < layout.end(); ++l) {
    for (int i = 0; i < kNumTensors; ++i) {
      const Tensor t = Tensor(i);
      if (IsPerLayer(t) && layout.has(t)) {
        f(t, l, layout.offset(t, l), layout.model().slice_size(t, l));
      }
    }
  }
  for (Tensor t : {Tensor::kLnfw, Tensor::kLnfb, Tensor::kHead}) {
    if (layout.has(t)) f(t, 0, layout.offset(t), layout.size(t));
  }
}

}  // namespace

Status ReadHfFragment(const HfTensorSource& source, const std::string& dir,
                      const FragmentLayout& layout, float* params) {
  const ModelConfig& c = layout.model().config();
  RETURN_IF_ERROR(CheckExportable(c));
  Status status;
  std::vector<float> scratch;
  ForEachSlice(layout, [&](Tensor, int, int64_t offset, int64_t size) {
    std::fill(params + offset, params + offset + size, 0.0f);  // padded vocabulary rows
  });
  ForEachSlice(layout, [&](Tensor t, int l, int64_t offset, int64_t) {
    for (const Piece& p : Pieces(c, t, l)) {
      if (!status.ok()) return;
      auto info = source.Find(p.name);
      if (!info.ok()) {
        status = info.status();
        return;
      }
      if ((*info)->shape != p.shape) {
        status = absl::InvalidArgumentError(
            absl::StrCat(dir, ": tensor ", p.name, " has shape ", ShapeString((*info)->shape),
                         ", the config needs ", ShapeString(p.shape)));
        return;
      }
      const size_t n = size_t((*info)->num_elements);
      float* dst = params + offset + p.offset;
      if (!p.transposed) {
        status = source.ReadFloats(p.name, dst, n);
        continue;
      }
      scratch.resize(n);
      status = source.ReadFloats(p.name, scratch.data(), n);
      if (status.ok()) Transpose(scratch.data(), p.shape[0], p.shape[1], dst);
    }
  });
  return status;
}

StatusOr<std::unique_ptr<HfFragmentTensors>> HfFragmentTensors::Of(const FragmentLayout& layout,
                                                                   const float* params,
                                                                   StDtype dtype) {
  const ModelConfig& c = layout.model().config();
  RETURN_IF_ERROR(CheckExportable(c));
  std::unique_ptr<HfFragmentTensors> out(new HfFragmentTensors);
  const int64_t elem = dtype == StDtype::kF32 ? 4 : 2;
  ForEachSlice(layout, [&](Tensor t, int l, int64_t offset, int64_t) {
    if (t == Tensor::kWte && !layout.is_first()) return;  // the tied copy
    for (Piece& p : Pieces(c, t, l)) {
      const float* data = params + offset + p.offset;
      if (p.transposed) {
        std::vector<float>& copy = out->owned_.emplace_back(size_t(p.shape[0] * p.shape[1]));
        Transpose(data, p.shape[1], p.shape[0], copy.data());
        data = copy.data();
      }
      int64_t bytes = elem;
      for (int64_t d : p.shape) bytes *= d;
      out->bytes_ += bytes;
      out->tensors_.push_back({std::move(p.name), dtype, p.shape, data});
    }
  });
  return out;
}

std::string HfShardName(int k, int n) {
  if (n == 1) return "model.safetensors";
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", k, n);
  return name;
}

Status WriteHfIndexAndConfig(
    const std::string& dir, const ModelConfig& config, StDtype dtype,
    const std::vector<std::pair<std::string, std::vector<std::string>>>& shards,
    int64_t total_bytes) {
  if (shards.size() > 1) {
    std::map<std::string, std::string> weight_map;
    for (const auto& [file, names] : shards) {
      for (const std::string& name : names) weight_map[name] = file;
    }
    RETURN_IF_ERROR(WriteSafetensorsIndex((fs::path(dir) / "model.safetensors.index.json").string(),
                                          total_bytes, weight_map));
  }
  const std::string json = HfConfigJson(config, dtype);
  AtomicFileWriter writer;
  RETURN_IF_ERROR(writer.Open((fs::path(dir) / "config.json").string()));
  RETURN_IF_ERROR(writer.Write(json.data(), json.size()));
  return writer.Commit();
}

Status WriteHfCheckpoint(const std::string& dir, const ModelConfig& c, const float* params,
                         const HfWriteOptions& options) {
  RETURN_IF_ERROR(ValidateConfig(c));
  const FragmentLayout whole(c, 0, c.num_layers);
  ASSIGN_OR_RETURN(auto all, HfFragmentTensors::Of(whole, params, options.dtype));
  // Greedy shards in transformers' order, none above max_shard_bytes unless one tensor is.
  const int64_t elem = options.dtype == StDtype::kF32 ? 4 : 2;
  std::vector<std::vector<StTensor>> groups(1);
  int64_t group_bytes = 0;
  for (const StTensor& t : all->tensors()) {
    int64_t bytes = elem;
    for (int64_t d : t.shape) bytes *= d;
    if (group_bytes > 0 && group_bytes + bytes > options.max_shard_bytes) {
      groups.emplace_back();
      group_bytes = 0;
    }
    group_bytes += bytes;
    groups.back().push_back(t);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create export directory ", dir, ": ", ec.message()));
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::vector<std::pair<std::string, std::vector<std::string>>> shards;
  for (size_t k = 0; k < groups.size(); ++k) {
    const std::string name = HfShardName(int(k) + 1, int(groups.size()));
    RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / name).string(), groups[k], metadata));
    auto& [file, names] = shards.emplace_back(name, std::vector<std::string>{});
    for (const StTensor& t : groups[k]) names.push_back(t.name);
  }
  return WriteHfIndexAndConfig(dir, c, options.dtype, shards, all->bytes());
}

}  // namespace longhaul::model
