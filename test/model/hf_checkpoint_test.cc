// Hugging Face model directories (model/hf_checkpoint.h): a llama and a GPT-2 written and read
// back bit for bit; the names, shapes and layout transformers expects (GPT-2's Conv1D
// weights transposed, q/k/v and gate/up split, padded vocabulary rows dropped); bf16 export
// rounding to nearest even; sharding and its index; and hostile directories (bad config.json
// values, unsupported variants, missing or misshapen tensors) refused with errors that name
// the file and the tensor.
#include "model/hf_checkpoint.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "model/init.h"
#include "model/init_from.h"
#include "model/layout.h"
#include "model/safetensors.h"
#include "test/model/test_util.h"

namespace longhaul::model {
namespace {

ModelConfig SmallLlama(bool tied) {
  ModelConfig c = MakeConfig(2, 32, 4, 300, 64);
  c.family = Family::kLlama;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 40;
  c.rope_theta = 500000.0;
  c.rope_scaling = {8.0, 1.0, 4.0, 32};
  c.tied_embeddings = tied;
  return c;
}

std::vector<float> Params(const ModelConfig& c) {
  const FragmentLayout whole(c, 0, c.num_layers);
  std::vector<float> p(whole.total());
  InitFragment(whole, 5, p.data());
  // Norm weights away from 1, so a misplaced one shows.
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    if (t == Tensor::kLn1w || t == Tensor::kLn2w || t == Tensor::kLnfw) {
      for (int64_t k = 0; k < whole.size(t); ++k) p[whole.offset(t) + k] = 1.0f + 0.001f * k;
    }
  }
  return p;
}

std::vector<float> ReadBack(const std::string& dir, const ModelConfig& c) {
  const FragmentLayout whole(c, 0, c.num_layers);
  std::vector<float> p(whole.total());
  const Status s = ReadInitFragment(dir, whole, p.data());
  INFO(s.ToString());
  REQUIRE(s.ok());
  return p;
}

std::vector<float> Tensor2(const std::string& dir, const std::string& name, size_t n) {
  auto src = HfTensorSource::Open(dir);
  REQUIRE(src.ok());
  std::vector<float> v(n);
  REQUIRE((*src)->ReadFloats(name, v.data(), n).ok());
  return v;
}

TEST_CASE("a llama round-trips through a Hugging Face directory", "[hf]") {
  const bool tied = GENERATE(true, false);
  const ModelConfig c = SmallLlama(tied);
  const std::vector<float> p = Params(c);
  const std::string dir = testing::TempDir(tied ? "hf_llama_tied" : "hf_llama");
  REQUIRE(WriteHfCheckpoint(dir, c, p.data()).ok());
  auto back = ReadHfConfig(dir);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(*back == c);
  CHECK(ReadBack(dir, c) == p);
  // HF's layout: q, k, v and gate, up are separate tensors, the vocabulary unpadded.
  auto src = HfTensorSource::Open(dir);
  REQUIRE(src.ok());
  CHECK((*src)->Has("lm_head.weight") == !tied);
  auto k = (*src)->Find("model.layers.1.self_attn.k_proj.weight");
  REQUIRE(k.ok());
  CHECK((*k)->shape == std::vector<int64_t>{16, 32});
  auto embed = (*src)->Find("model.embed_tokens.weight");
  REQUIRE(embed.ok());
  CHECK((*embed)->shape == std::vector<int64_t>{300, 32});
  const ParameterLayout layout(c);
  const std::vector<float> up = Tensor2(dir, "model.layers.0.mlp.up_proj.weight", 40 * 32);
  const float* fcw = p.data() + layout.offset(Tensor::kFcw, 0) + 40 * 32;  // gate rows first
  CHECK(std::vector<float>(fcw, fcw + 40 * 32) == up);
}

TEST_CASE("a GPT-2 exports to Hugging Face's GPT-2 layout and reads back", "[hf]") {
  const ModelConfig c = MakeConfig(2, 32, 4, 300, 64);
  const std::vector<float> p = Params(c);
  const std::string dir = testing::TempDir("hf_gpt2");
  REQUIRE(WriteHfCheckpoint(dir, c, p.data()).ok());
  auto back = ReadHfConfig(dir);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(*back == c);
  CHECK(ReadBack(dir, c) == p);
  // Conv1D: c_attn.weight is (C, 3C), our qkvw (3C, C) transposed.
  const ParameterLayout layout(c);
  const std::vector<float> w = Tensor2(dir, "transformer.h.1.attn.c_attn.weight", 32 * 96);
  const float* qkvw = p.data() + layout.offset(Tensor::kQkvw, 1);
  for (int out = 0; out < 96; out += 7) {
    for (int in = 0; in < 32; in += 5) CHECK(w[in * 96 + out] == qkvw[out * 32 + in]);
  }
  // The subspace-cut variant has no Hugging Face form.
  ModelConfig sub = c;
  sub.residual_subspace = 8;
  std::vector<float> ps(NumParameters(sub));
  const Status s = WriteHfCheckpoint(testing::TempDir("hf_sub"), sub, ps.data());
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("bf16 export rounds to nearest even; shards come with an index", "[hf]") {
  const ModelConfig c = SmallLlama(false);
  const std::vector<float> p = Params(c);
  const std::string dir = testing::TempDir("hf_bf16");
  HfWriteOptions o;
  o.dtype = StDtype::kBF16;
  o.max_shard_bytes = 8 << 10;
  REQUIRE(WriteHfCheckpoint(dir, c, p.data(), o).ok());
  auto index = ReadSafetensorsIndex(dir + "/model.safetensors.index.json");
  REQUIRE(index.ok());
  CHECK(index->size() == 2 * 9 + 3);
  CHECK(!std::filesystem::exists(dir + "/model.safetensors"));
  const std::vector<float> back = ReadBack(dir, c);
  REQUIRE(back.size() == p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    if (back[i] != Bf16ToFloat(FloatToBf16(p[i]))) FAIL("parameter " << i << " not bf16-rounded");
  }
  std::ifstream cfg(dir + "/config.json");
  std::string text((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
  CHECK_THAT(text, Catch::Contains("\"torch_dtype\": \"bfloat16\""));
  CHECK_THAT(text, Catch::Contains("\"rope_type\": \"llama3\""));
  CHECK_THAT(text, Catch::Contains("\"rms_norm_eps\": 1e-05"));
}

// Writes `json` as DIR/config.json over a valid export and returns the error of reading it.
std::string ConfigError(const std::string& name, const std::string& json) {
  const ModelConfig c = SmallLlama(false);
  const std::vector<float> p = Params(c);
  const std::string dir = testing::TempDir(name);
  REQUIRE(WriteHfCheckpoint(dir, c, p.data()).ok());
  testing::WriteBytes(dir + "/config.json", json);
  auto r = ReadHfConfig(dir);
  REQUIRE(!r.ok());
  return std::string(r.status().message());
}

TEST_CASE("hostile Hugging Face directories give clear errors", "[hf]") {
  const std::string base =
      R"("model_type": "llama", "hidden_size": 32, "intermediate_size": 40,
         "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
         "vocab_size": 300, "head_dim": 8)";
  CHECK_THAT(ConfigError("hf_bad1", "[1, 2]"), Catch::Contains("not a JSON object"));
  CHECK_THAT(ConfigError("hf_bad2", "{\"model_type\": \"mistral\"}"),
             Catch::Contains("'mistral' is not supported"));
  CHECK_THAT(ConfigError("hf_bad3", "{" + base + ", \"hidden_size\": \"32\"}"),
             Catch::Contains("twice"));
  CHECK_THAT(ConfigError("hf_bad4", R"({"model_type": "llama", "num_hidden_layers": 2.5})"),
             Catch::Contains("num_hidden_layers: must be an integer"));
  CHECK_THAT(ConfigError("hf_bad5", "{" + base + ", \"rope_scaling\": {\"rope_type\": \"yarn\"}}"),
             Catch::Contains("rope type 'yarn' is not supported"));
  CHECK_THAT(ConfigError("hf_bad6", "{" + base + ", \"attention_bias\": true}"),
             Catch::Contains("attention_bias"));
  CHECK_THAT(ConfigError("hf_bad7", R"({"model_type": "llama", "hidden_size": 32,
             "intermediate_size": 40, "num_attention_heads": 4, "num_key_value_heads": 3,
             "num_hidden_layers": 2, "vocab_size": 300})"),
             Catch::Contains("kv_heads"));
  CHECK_THAT(ConfigError("hf_bad8", "{" + base + ", \"vocab_size\": 9223372036854775807}"),
             Catch::Contains("vocab_size"));
  CHECK_THAT(ConfigError("hf_bad9", "{" + base + ", \"rms_norm_eps\": -1}"),
             Catch::Contains("rms_norm_eps"));

  // A tensor of the wrong shape, and one missing: named, with the directory.
  const ModelConfig c = SmallLlama(false);
  const std::vector<float> p = Params(c);
  const std::string dir = testing::TempDir("hf_bad_shape");
  REQUIRE(WriteHfCheckpoint(dir, c, p.data()).ok());
  ModelConfig wider = c;
  wider.intermediate_size = 48;
  const FragmentLayout layout(wider, 0, 2);
  std::vector<float> out(layout.total());
  auto src = HfTensorSource::Open(dir);
  REQUIRE(src.ok());
  Status s = ReadHfFragment(**src, dir, layout, out.data());
  CHECK_THAT(std::string(s.message()),
             Catch::Contains("model.layers.0.mlp.gate_proj.weight has shape [40, 32]"));
  const std::vector<StTensor> lone = {{"model.norm.weight", StDtype::kF32, {32}, p.data()}};
  REQUIRE(WriteSafetensors(dir + "/model.safetensors", lone, {{"format", "pt"}}).ok());
  auto src2 = HfTensorSource::Open(dir);
  REQUIRE(src2.ok());
  s = ReadHfFragment(**src2, dir, FragmentLayout(c, 0, 2), out.data());
  CHECK(!s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("model.embed_tokens.weight"));
}

}  // namespace
}  // namespace longhaul::model
