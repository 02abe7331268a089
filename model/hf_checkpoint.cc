// Hugging Face llama directories (see hf_checkpoint.h): config.json both ways, the tensor
// name mapping, and reading / writing a fragment's tensors through model/safetensors.h.
#include "model/hf_checkpoint.h"

#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_load.h"
#include "model/file_io.h"

namespace longhaul::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int64_t kMaxConfigBytes = int64_t(1) << 20;

// One HF tensor inside one of our slices: its name, its shape, where it starts (floats
// from the start of the slice).
struct Piece {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
};

std::string Layer(int l, const char* rest) { return absl::StrCat("model.layers.", l, ".", rest); }

// The HF tensors of slice (t, layer) of a llama; none for the slots a llama leaves empty.
std::vector<Piece> Pieces(const ModelConfig& c, Tensor t, int l) {
  const int64_t C = c.channels, V = c.vocab_size, I = c.intermediate_size;
  const int64_t q = int64_t(c.num_heads) * c.head_dim, kv = int64_t(c.num_kv_heads) * c.head_dim;
  switch (t) {
    case Tensor::kWte:
      return {{"model.embed_tokens.weight", {V, C}, 0}};
    case Tensor::kLn1w:
      return {{Layer(l, "input_layernorm.weight"), {C}, 0}};
    case Tensor::kQkvw:
      return {{Layer(l, "self_attn.q_proj.weight"), {q, C}, 0},
              {Layer(l, "self_attn.k_proj.weight"), {kv, C}, q * C},
              {Layer(l, "self_attn.v_proj.weight"), {kv, C}, (q + kv) * C}};
    case Tensor::kAttprojw:
      return {{Layer(l, "self_attn.o_proj.weight"), {C, q}, 0}};
    case Tensor::kLn2w:
      return {{Layer(l, "post_attention_layernorm.weight"), {C}, 0}};
    case Tensor::kFcw:
      return {{Layer(l, "mlp.gate_proj.weight"), {I, C}, 0},
              {Layer(l, "mlp.up_proj.weight"), {I, C}, I * C}};
    case Tensor::kFcprojw:
      return {{Layer(l, "mlp.down_proj.weight"), {C, I}, 0}};
    case Tensor::kLnfw:
      return {{"model.norm.weight", {C}, 0}};
    case Tensor::kHead:
      return {{"lm_head.weight", {V, C}, 0}};
    default:
      return {};
  }
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// A float as the shortest decimal that reads back as the same float, then as a double, so
// that 1e-5f appears in JSON as 1e-05 rather than 9.99999974737875e-06.
double ShortestDouble(float v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::stod(std::string(buf, r.ptr));
}

class ConfigReader {
 public:
  ConfigReader(const Json& j, std::string path) : j_(j), path_(std::move(path)) {}

  Status Error(const std::string& key, const std::string& problem) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", key, ": ", problem));
  }
  bool Has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  StatusOr<int> Int(const std::string& key, int64_t min, int64_t max,
                    std::optional<int> fallback = std::nullopt) const {
    if (!Has(key)) {
      if (fallback) return *fallback;
      return Error(key, "missing");
    }
    const Json& v = j_.at(key);
    if (!v.is_number_integer())
      return Error(key, absl::StrCat("must be an integer, got ", v.dump()));
    const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)
                          ? INT64_MAX
                          : v.get<int64_t>();
    if (x < min || x > max) {
      return Error(key, absl::StrCat(x, " is outside [", min, ", ", max, "]"));
    }
    return int(x);
  }

  StatusOr<double> Number(const Json& v, const std::string& key, double min, double max) const {
    if (!v.is_number()) return Error(key, absl::StrCat("must be a number, got ", v.dump()));
    const double x = v.get<double>();
    if (!(x >= min && x <= max)) {
      return Error(key, absl::StrCat(x, " is outside [", min, ", ", max, "]"));
    }
    return x;
  }
  StatusOr<double> Number(const std::string& key, double min, double max, double fallback) const {
    if (!Has(key)) return fallback;
    return Number(j_.at(key), key, min, max);
  }

  StatusOr<bool> Bool(const std::string& key, bool fallback) const {
    if (!Has(key)) return fallback;
    if (!j_.at(key).is_boolean()) return Error(key, "must be true or false");
    return j_.at(key).get<bool>();
  }

  // rope_scaling (transformers 4) or rope_parameters (transformers 5): null, type "default",
  // or type "llama3" with its four numbers. Other scalings are refused, named.
  Status Rope(ModelConfig* c) const {
    const Json* rope = nullptr;
    std::string key = "rope_scaling";
    if (Has("rope_parameters")) {
      key = "rope_parameters";
      rope = &j_.at(key);
    } else if (Has("rope_scaling")) {
      rope = &j_.at(key);
    }
    if (rope == nullptr) return absl::OkStatus();
    if (!rope->is_object()) return Error(key, "must be an object or null");
    if (rope->contains("rope_theta")) {
      ASSIGN_OR_RETURN(c->rope_theta,
                       Number(rope->at("rope_theta"), key + ".rope_theta", 1.0 + 1e-9, 1e12));
    }
    std::string type;
    for (const char* k : {"rope_type", "type"}) {
      if (rope->contains(k) && rope->at(k).is_string()) type = rope->at(k).get<std::string>();
    }
    if (type.empty() || type == "default") return absl::OkStatus();
    if (type != "llama3") {
      return Error(
          key, absl::StrCat("rope type '", type, "' is not supported (default and llama3 are)"));
    }
    auto field = [&](const char* name, double min, double max) -> StatusOr<double> {
      if (!rope->contains(name)) return Error(key, absl::StrCat("llama3 scaling needs ", name));
      return Number(rope->at(name), absl::StrCat(key, ".", name), min, max);
    };
    ASSIGN_OR_RETURN(c->rope_scaling.factor, field("factor", 1.0, 1e6));
    ASSIGN_OR_RETURN(c->rope_scaling.low_freq_factor, field("low_freq_factor", 1e-9, 1e6));
    ASSIGN_OR_RETURN(c->rope_scaling.high_freq_factor, field("high_freq_factor", 1e-9, 1e6));
    ASSIGN_OR_RETURN(const double original,
                     field("original_max_position_embeddings", 1, double(1 << 30)));
    if (original != std::floor(original)) {
      return Error(key, "original_max_position_embeddings must be an integer");
    }
    c->rope_scaling.original_context = int(original);
    return absl::OkStatus();
  }

 private:
  const Json& j_;
  std::string path_;
};

}  // namespace

bool IsHfModelDir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

StatusOr<ModelConfig> ReadHfConfig(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  ASSIGN_OR_RETURN(const int64_t size, FileSize(path, "model config"));
  if (size > kMaxConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", size, " bytes, more than a config.json's limit of 1 MiB"));
  }
  std::string text(size, '\0');
  RETURN_IF_ERROR(ReadFileRange(path, "model config", 0, text.data(), size));
  ASSIGN_OR_RETURN(const Json j, ParseUntrustedJson(text.data(), text.size(), path));
  if (!j.is_object()) return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  ConfigReader r(j, path);
  const std::string type = j.contains("model_type") && j["model_type"].is_string()
                               ? j["model_type"].get<std::string>()
                               : "";
  if (type != "llama") {
    return r.Error("model_type", absl::StrCat("'", type,
                                              "' is not supported (Hugging Face checkpoints of "
                                              "model_type llama load; GPT-2 ones as llm.c files)"));
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    ASSIGN_OR_RETURN(const bool has, r.Bool(bias, false));
    if (has) return r.Error(bias, "biases are not supported (a llama has none)");
  }
  if (r.Has("hidden_act") &&
      (!j["hidden_act"].is_string() || j["hidden_act"].get<std::string>() != "silu")) {
    return r.Error("hidden_act", absl::StrCat(j["hidden_act"].dump(), " is not supported (silu)"));
  }
  ModelConfig c;
  c.family = Family::kLlama;
  ASSIGN_OR_RETURN(c.num_layers, r.Int("num_hidden_layers", 1, 1 << 16));
  ASSIGN_OR_RETURN(c.channels, r.Int("hidden_size", 1, 1 << 20));
  ASSIGN_OR_RETURN(c.num_heads, r.Int("num_attention_heads", 1, 1 << 16));
  ASSIGN_OR_RETURN(c.num_kv_heads, r.Int("num_key_value_heads", 1, 1 << 16, c.num_heads));
  if (!r.Has("head_dim") && c.channels % c.num_heads != 0) {
    return r.Error("num_attention_heads", absl::StrCat(c.num_heads, " does not divide hidden_size ",
                                                       c.channels, " and head_dim is not given"));
  }
  ASSIGN_OR_RETURN(c.head_dim, r.Int("head_dim", 2, 4096, c.channels / c.num_heads));
  ASSIGN_OR_RETURN(c.intermediate_size, r.Int("intermediate_size", 1, 1 << 22));
  ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size", 1, 1 << 30));
  c.padded_vocab_size = PadVocab(c.vocab_size);
  ASSIGN_OR_RETURN(c.max_seq_len, r.Int("max_position_embeddings", 1, 1 << 30, 2048));
  ASSIGN_OR_RETURN(const double eps, r.Number("rms_norm_eps", 1e-12, 0.1, 1e-6));
  c.norm_eps = float(eps);
  ASSIGN_OR_RETURN(c.rope_theta, r.Number("rope_theta", 1.0 + 1e-9, 1e12, 10000.0));
  RETURN_IF_ERROR(r.Rope(&c));
  ASSIGN_OR_RETURN(c.tied_embeddings, r.Bool("tie_word_embeddings", false));
  RETURN_IF_ERROR(Annotate(ValidateConfig(c), path));
  return c;
}

std::string HfConfigJson(const ModelConfig& c, StDtype dtype) {
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLM"};
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.channels;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_seq_len;
  j["mlp_bias"] = false;
  j["model_type"] = "llama";
  j["num_attention_heads"] = c.num_heads;
  j["num_hidden_layers"] = c.num_layers;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["pretraining_tp"] = 1;
  j["rms_norm_eps"] = ShortestDouble(c.norm_eps);
  if (c.rope_scaling.factor > 0) {
    j["rope_scaling"] = {{"factor", c.rope_scaling.factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_context},
                         {"rope_type", "llama3"}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["torch_dtype"] = dtype == StDtype::kBF16  ? "bfloat16"
                     : dtype == StDtype::kF16 ? "float16"
                                              : "float32";
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

Status ReadHfFragment(const HfTensorSource& source, const std::string& dir,
                      const FragmentLayout& layout, float* params) {
  const ModelConfig& c = layout.model().config();
  if (c.family != Family::kLlama) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": a Hugging Face checkpoint loads into a llama, not ", FamilyName(c.family)));
  }
  auto read = [&](Tensor t, int l, float* slice) -> Status {
    for (const Piece& p : Pieces(c, t, l)) {
      ASSIGN_OR_RETURN(const StTensorInfo* info, source.Find(p.name));
      if (info->shape != p.shape) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": tensor ", p.name, " has shape ", ShapeString(info->shape),
                         ", the config needs ", ShapeString(p.shape)));
      }
      RETURN_IF_ERROR(source.ReadFloats(p.name, slice + p.offset, size_t(info->num_elements)));
    }
    return absl::OkStatus();
  };
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    if (!layout.has(t)) continue;
    if (IsPerLayer(t)) {
      for (int l = layout.begin(); l < layout.end(); ++l) {
        RETURN_IF_ERROR(read(t, l, params + layout.offset(t, l)));
      }
    } else {
      float* slice = params + layout.offset(t);
      std::fill(slice, slice + layout.size(t), 0.0f);  // padded vocabulary rows
      RETURN_IF_ERROR(read(t, 0, slice));
    }
  }
  return absl::OkStatus();
}

Status WriteHfCheckpoint(const std::string& dir, const ModelConfig& c, const float* params,
                         const HfWriteOptions& options) {
  RETURN_IF_ERROR(ValidateConfig(c));
  if (c.family != Family::kLlama) {
    return absl::InvalidArgumentError(
        absl::StrCat("Hugging Face export of a ", FamilyName(c.family), " model is not supported"));
  }
  const ParameterLayout layout(c);
  // Every HF tensor in transformers' order, pointing into `params` (each is a contiguous
  // block of rows of one of our slices).
  std::vector<StTensor> tensors;
  auto add = [&](Tensor t, int l, int64_t slice_offset) {
    for (Piece& p : Pieces(c, t, l)) {
      tensors.push_back(
          {std::move(p.name), options.dtype, p.shape, params + slice_offset + p.offset});
    }
  };
  add(Tensor::kWte, 0, layout.offset(Tensor::kWte));
  for (int l = 0; l < c.num_layers; ++l) {
    for (Tensor t : {Tensor::kLn1w, Tensor::kQkvw, Tensor::kAttprojw, Tensor::kLn2w, Tensor::kFcw,
                     Tensor::kFcprojw}) {
      add(t, l, layout.offset(t, l));
    }
  }
  add(Tensor::kLnfw, 0, layout.offset(Tensor::kLnfw));
  if (!TiedHead(c)) add(Tensor::kHead, 0, layout.offset(Tensor::kHead));

  const int64_t elem = options.dtype == StDtype::kF32 ? 4 : 2;
  std::vector<std::vector<StTensor>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (StTensor& t : tensors) {
    int64_t bytes = elem;
    for (int64_t d : t.shape) bytes *= d;
    if (shard_bytes > 0 && shard_bytes + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shard_bytes += bytes;
    total_bytes += bytes;
    shards.back().push_back(std::move(t));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create export directory ", dir, ": ", ec.message()));
  }
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (shards.size() == 1) {
    RETURN_IF_ERROR(
        WriteSafetensors((fs::path(dir) / "model.safetensors").string(), shards[0], metadata));
  } else {
    std::map<std::string, std::string> weight_map;
    char name[64];
    for (size_t k = 0; k < shards.size(); ++k) {
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
      RETURN_IF_ERROR(WriteSafetensors((fs::path(dir) / name).string(), shards[k], metadata));
      for (const StTensor& t : shards[k]) weight_map[t.name] = name;
    }
    RETURN_IF_ERROR(WriteSafetensorsIndex((fs::path(dir) / "model.safetensors.index.json").string(),
                                          total_bytes, weight_map));
  }
  const std::string json = HfConfigJson(c, options.dtype);
  AtomicFileWriter writer;
  RETURN_IF_ERROR(writer.Open((fs::path(dir) / "config.json").string()));
  RETURN_IF_ERROR(writer.Write(json.data(), json.size()));
  return writer.Commit();
}

}  // namespace longhaul::model
