// Hugging Face config.json, both ways (see hf_checkpoint.h): LlamaForCausalLM's keys for
// family llama, GPT2LMHeadModel's for gpt2. Parsed as untrusted JSON; every value's type and
// range checked, unsupported variants (other rope scalings, biases on a llama, another GELU
// or epsilon on a GPT-2) refused by name.
#include <charconv>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/json_load.h"
#include "model/file_io.h"
#include "model/hf_checkpoint.h"

namespace longhaul::model {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr int64_t kMaxConfigBytes = int64_t(1) << 20;

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
  const Json& At(const std::string& key) const { return j_.at(key); }

  StatusOr<int> Int(const std::string& key, int64_t min, int64_t max,
                    std::optional<int> fallback = std::nullopt) const {
    if (!Has(key)) {
      if (fallback) return *fallback;
      return Error(key, "missing");
    }
    const Json& v = j_.at(key);
    if (!v.is_number_integer()) {
      return Error(key, absl::StrCat("must be an integer, got ", v.dump()));
    }
    const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)
                          ? INT64_MAX
                          : v.get<int64_t>();
    if (x < min || x > max)
      return Error(key, absl::StrCat(x, " is outside [", min, ", ", max, "]"));
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

  std::string String(const std::string& key) const {
    return Has(key) && j_.at(key).is_string() ? j_.at(key).get<std::string>() : "";
  }

  // rope_scaling (transformers 4) or rope_parameters (transformers 5): null, type "default",
  // or type "llama3" with its four numbers. Other scalings are refused, named.
  Status Rope(ModelConfig* c) const {
    std::string key = Has("rope_parameters") ? "rope_parameters" : "rope_scaling";
    if (!Has(key)) return absl::OkStatus();
    const Json& rope = j_.at(key);
    if (!rope.is_object()) return Error(key, "must be an object or null");
    if (rope.contains("rope_theta")) {
      ASSIGN_OR_RETURN(c->rope_theta,
                       Number(rope.at("rope_theta"), key + ".rope_theta", 1.0 + 1e-9, 1e12));
    }
    std::string type;
    for (const char* k : {"rope_type", "type"}) {
      if (rope.contains(k) && rope.at(k).is_string()) type = rope.at(k).get<std::string>();
    }
    if (type.empty() || type == "default") return absl::OkStatus();
    if (type != "llama3") {
      return Error(
          key, absl::StrCat("rope type '", type, "' is not supported (default and llama3 are)"));
    }
    auto field = [&](const char* name, double min, double max) -> StatusOr<double> {
      if (!rope.contains(name)) return Error(key, absl::StrCat("llama3 scaling needs ", name));
      return Number(rope.at(name), absl::StrCat(key, ".", name), min, max);
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

StatusOr<ModelConfig> LlamaConfig(const ConfigReader& r) {
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    ASSIGN_OR_RETURN(const bool has, r.Bool(bias, false));
    if (has) return r.Error(bias, "biases are not supported (a llama has none)");
  }
  if (r.Has("hidden_act") && r.String("hidden_act") != "silu") {
    return r.Error("hidden_act",
                   absl::StrCat(r.At("hidden_act").dump(), " is not supported (silu)"));
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
  ASSIGN_OR_RETURN(c.max_seq_len, r.Int("max_position_embeddings", 1, 1 << 30, 2048));
  ASSIGN_OR_RETURN(const double eps, r.Number("rms_norm_eps", 1e-12, 0.1, 1e-6));
  c.norm_eps = float(eps);
  ASSIGN_OR_RETURN(c.rope_theta, r.Number("rope_theta", 1.0 + 1e-9, 1e12, 10000.0));
  RETURN_IF_ERROR(r.Rope(&c));
  ASSIGN_OR_RETURN(c.tied_embeddings, r.Bool("tie_word_embeddings", false));
  return c;
}

// GPT-2 as llm.c computes it: tanh GELU, layernorm epsilon 1e-5, MLP width 4C, a tied head.
StatusOr<ModelConfig> Gpt2Config(const ConfigReader& r) {
  const std::string act =
      r.Has("activation_function") ? r.String("activation_function") : "gelu_new";
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    return r.Error("activation_function",
                   absl::StrCat("'", act, "' is not supported (the tanh GELU: gelu_new)"));
  }
  ASSIGN_OR_RETURN(const double eps, r.Number("layer_norm_epsilon", 0, 1, 1e-5));
  if (std::fabs(eps - 1e-5) > 1e-12) {
    return r.Error("layer_norm_epsilon", absl::StrCat(eps, " is not supported (1e-5, as llm.c)"));
  }
  ASSIGN_OR_RETURN(const bool tied, r.Bool("tie_word_embeddings", true));
  if (!tied) return r.Error("tie_word_embeddings", "an untied GPT-2 head is not supported");
  ModelConfig c;
  ASSIGN_OR_RETURN(c.num_layers, r.Int("n_layer", 1, 1 << 16));
  ASSIGN_OR_RETURN(c.channels, r.Int("n_embd", 1, 1 << 20));
  ASSIGN_OR_RETURN(c.num_heads, r.Int("n_head", 1, 1 << 16));
  ASSIGN_OR_RETURN(c.vocab_size, r.Int("vocab_size", 1, 1 << 30));
  ASSIGN_OR_RETURN(c.max_seq_len, r.Int("n_positions", 1, 1 << 20));
  ASSIGN_OR_RETURN(const int inner, r.Int("n_inner", 0, 1 << 24, 4 * c.channels));
  if (inner != 4 * c.channels) {
    return r.Error("n_inner",
                   absl::StrCat(inner, " is not supported (4 n_embd = ", 4 * c.channels, ")"));
  }
  return c;
}

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
  const ConfigReader r(j, path);
  const std::string type = r.String("model_type");
  StatusOr<ModelConfig> config =
      type == "llama" ? LlamaConfig(r)
      : type == "gpt2"
          ? Gpt2Config(r)
          : StatusOr<ModelConfig>(r.Error(
                "model_type", absl::StrCat("'", type, "' is not supported (llama and gpt2 are)")));
  if (!config.ok()) return config.status();
  config->padded_vocab_size = PadVocab(config->vocab_size);
  RETURN_IF_ERROR(Annotate(ValidateConfig(*config), path));
  return config;
}

std::string HfConfigJson(const ModelConfig& c, StDtype dtype) {
  nlohmann::ordered_json j;
  const char* torch_dtype = dtype == StDtype::kBF16  ? "bfloat16"
                            : dtype == StDtype::kF16 ? "float16"
                                                     : "float32";
  if (c.family == Family::kGpt2) {
    j["activation_function"] = "gelu_new";
    j["architectures"] = {"GPT2LMHeadModel"};
    j["attn_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["initializer_range"] = 0.02;
    j["layer_norm_epsilon"] = 1e-05;
    j["model_type"] = "gpt2";
    j["n_ctx"] = c.max_seq_len;
    j["n_embd"] = c.channels;
    j["n_head"] = c.num_heads;
    j["n_inner"] = nullptr;
    j["n_layer"] = c.num_layers;
    j["n_positions"] = c.max_seq_len;
    j["resid_pdrop"] = 0.0;
    j["scale_attn_weights"] = true;
    j["tie_word_embeddings"] = true;
    j["torch_dtype"] = torch_dtype;
    j["use_cache"] = true;
    j["vocab_size"] = c.vocab_size;
    return j.dump(2) + "\n";
  }
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
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

}  // namespace longhaul::model
