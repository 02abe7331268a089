// llm.c checkpoint and token files (GPT-2's uint16 and llama-3's uint32 ids): bit-exact round
// trips, and a clear error (never a crash) for every kind of bad input: missing, truncated,
// bad magic or version, ids above INT32_MAX, tokens outside the vocabulary, a config that
// does not fit the checkpoint.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "model/checkpoint.h"
#include "model/evaluate.h"
#include "model/token_data.h"
#include "test/model/test_util.h"

namespace longhaul::model {
namespace {

using Catch::Matchers::Contains;

std::vector<float> RandomParams(const ModelConfig& c) {
  std::vector<float> p(NumParameters(c));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (float& x : p) x = normal(rng);
  return p;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("checkpoint round-trips bit-exactly", "[formats]") {
  const std::string dir = testing::TempDir("ckpt_roundtrip");
  const ModelConfig c = MakeConfig(2, 16, 2, 67, 8);
  const std::vector<float> params = RandomParams(c);
  REQUIRE(WriteCheckpoint(dir + "/sub/model.bin", c, params.data()).ok());
  auto back = ReadCheckpoint(dir + "/sub/model.bin");
  REQUIRE(back.ok());
  CHECK(back->config == c);
  REQUIRE(back->params.size() == params.size());
  CHECK(std::memcmp(back->params.data(), params.data(), params.size() * 4) == 0);
  // llm.c's header layout.
  const std::string bytes = ReadAll(dir + "/sub/model.bin");
  REQUIRE(bytes.size() == 1024 + params.size() * 4);
  int32_t header[8];
  std::memcpy(header, bytes.data(), sizeof(header));
  CHECK(header[0] == 20240326);
  CHECK(header[1] == 3);
  CHECK(header[2] == 8);
  CHECK(header[3] == 67);
  CHECK(header[4] == 2);
  CHECK(header[5] == 2);
  CHECK(header[6] == 16);
  CHECK(header[7] == 128);
}

TEST_CASE("bad checkpoints give clear errors", "[formats]") {
  const std::string dir = testing::TempDir("ckpt_bad");
  const ModelConfig c = MakeConfig(1, 8, 2, 10, 4);
  const std::vector<float> params = RandomParams(c);
  REQUIRE(WriteCheckpoint(dir + "/good.bin", c, params.data()).ok());
  const std::string good = ReadAll(dir + "/good.bin");

  auto missing = ReadCheckpoint(dir + "/nope.bin");
  CHECK(absl::IsNotFound(missing.status()));
  CHECK_THAT(std::string(missing.status().message()), Contains("nope.bin"));

  testing::WriteBytes(dir + "/short.bin", good.substr(0, good.size() - 4));
  CHECK_THAT(std::string(ReadCheckpoint(dir + "/short.bin").status().message()),
             Contains("truncated"));
  testing::WriteBytes(dir + "/tiny.bin", good.substr(0, 100));
  CHECK_THAT(std::string(ReadCheckpoint(dir + "/tiny.bin").status().message()),
             Contains("truncated"));
  testing::WriteBytes(dir + "/long.bin", good + "xx");
  CHECK_THAT(std::string(ReadCheckpoint(dir + "/long.bin").status().message()),
             Contains("trailing"));

  std::string bad = good;
  bad[0] = 'X';
  testing::WriteBytes(dir + "/magic.bin", bad);
  CHECK_THAT(std::string(ReadCheckpoint(dir + "/magic.bin").status().message()),
             Contains("bad magic"));

  bad = good;
  const int32_t v5 = 5;
  std::memcpy(bad.data() + 4, &v5, 4);
  testing::WriteBytes(dir + "/v5.bin", bad);
  CHECK_THAT(std::string(ReadCheckpoint(dir + "/v5.bin").status().message()), Contains("bf16"));

  bad = good;
  const int32_t heads = 3;  // 8 channels are not divisible into 3 heads
  std::memcpy(bad.data() + 5 * 4, &heads, 4);
  testing::WriteBytes(dir + "/heads.bin", bad);
  CHECK_THAT(std::string(ReadCheckpoint(dir + "/heads.bin").status().message()),
             Contains("multiple of heads"));

  // A header whose vocab and context would overflow an int when added (a fuzzer's find):
  // rejected as too large, not wrapped into a small negative size that passes.
  bad = good;
  const int32_t huge_vocab = 998244352, huge_context = 1979777032, wide = 1024;
  std::memcpy(bad.data() + 2 * 4, &huge_context, 4);
  std::memcpy(bad.data() + 3 * 4, &huge_vocab, 4);
  std::memcpy(bad.data() + 6 * 4, &wide, 4);
  std::memcpy(bad.data() + 7 * 4, &huge_vocab, 4);
  testing::WriteBytes(dir + "/huge.bin", bad);
  CHECK_THAT(std::string(ReadCheckpoint(dir + "/huge.bin").status().message()),
             Contains("model too large"));

  const Status mismatch = CheckConfigMatches(MakeConfig(2, 8, 2, 10, 4), c, "good.bin");
  CHECK_THAT(std::string(mismatch.message()), Contains("layers 2 vs 1"));
  CHECK(CheckConfigMatches(c, c, "good.bin").ok());
}

TEST_CASE("token files and text", "[formats]") {
  const std::string dir = testing::TempDir("tokens");
  const std::vector<uint32_t> tokens = {1, 2, 3, 65535, 0, 7};
  REQUIRE(WriteTokenFile(dir + "/t.bin", tokens).ok());
  auto data = ReadTokenData(dir + "/t.bin", DataFormat::kAuto);
  REQUIRE(data.ok());
  CHECK(data->format == DataFormat::kLlmc);
  CHECK(data->tokens == tokens);
  CHECK(data->max_token == 65535);
  CHECK_THAT(std::string(CheckTokensFit(*data, 50257).message()),
             Contains("token 65535 at position 3"));

  testing::WriteBytes(dir + "/text.txt", "hi \xff");
  auto text = ReadTokenData(dir + "/text.txt", DataFormat::kAuto);
  REQUIRE(text.ok());
  CHECK(text->format == DataFormat::kText);
  CHECK(text->tokens == std::vector<uint32_t>{'h', 'i', ' ', 255});
  CHECK(CheckTokensFit(*text, 256).ok());

  CHECK(absl::IsNotFound(ReadTokenData(dir + "/none", DataFormat::kAuto).status()));
  CHECK_THAT(std::string(ReadTokenData(dir + "/text.txt", DataFormat::kLlmc).status().message()),
             Contains("truncated"));
  testing::WriteBytes(dir + "/empty.txt", "");
  CHECK_THAT(std::string(ReadTokenData(dir + "/empty.txt", DataFormat::kText).status().message()),
             Contains("empty"));
  const std::string whole = ReadAll(dir + "/t.bin");
  testing::WriteBytes(dir + "/cut.bin", whole.substr(0, whole.size() - 1));
  CHECK_THAT(std::string(ReadTokenData(dir + "/cut.bin", DataFormat::kAuto).status().message()),
             Contains("truncated"));
  std::string bad_magic = whole;
  bad_magic[1] = 0;
  testing::WriteBytes(dir + "/magic.bin", bad_magic);
  CHECK_THAT(std::string(ReadTokenData(dir + "/magic.bin", DataFormat::kLlmc).status().message()),
             Contains("bad magic"));
  CHECK(!ParseDataFormat("csv").ok());
}

// An llm.c token file as llm.c's data scripts write it: a 256-int32 header, then the ids.
template <typename Id>
std::string TokenFileBytes(int32_t magic, int32_t version, int32_t count,
                           const std::vector<Id>& ids) {
  int32_t header[256] = {magic, version, count};
  std::string bytes(reinterpret_cast<const char*>(header), sizeof(header));
  bytes.append(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(Id));
  return bytes;
}

int32_t IntAt(const std::string& bytes, size_t i) {
  int32_t v;
  std::memcpy(&v, bytes.data() + 4 * i, 4);
  return v;
}

TEST_CASE("llama-3 token files: uint32 ids", "[formats]") {
  const std::string dir = testing::TempDir("tokens32");

  // Round trip with ids above 65535: the auto width writes the uint32 kind.
  const std::vector<uint32_t> big = {1, 65536, 128255, 2147483646, 0, 70000};
  REQUIRE(WriteTokenFile(dir + "/big.bin", big).ok());
  const std::string bytes = ReadAll(dir + "/big.bin");
  REQUIRE(bytes.size() == 1024 + big.size() * 4);
  CHECK(IntAt(bytes, 0) == 20240801);
  CHECK(IntAt(bytes, 1) == 7);
  CHECK(IntAt(bytes, 2) == int32_t(big.size()));
  CHECK(IntAt(bytes, 256 + 2) == 128255);  // little-endian uint32 after the header
  for (DataFormat format : {DataFormat::kAuto, DataFormat::kLlmc}) {
    auto data = ReadTokenData(dir + "/big.bin", format);
    REQUIRE(data.ok());
    CHECK(data->format == DataFormat::kLlmc);
    CHECK(data->tokens == big);
    CHECK(data->max_token == 2147483646);
  }
  auto data = ReadTokenData(dir + "/big.bin", DataFormat::kAuto);
  REQUIRE(data.ok());
  CHECK(CheckTokensFit(*data, 2147483647).ok());  // the largest vocabulary an int holds
  CHECK_THAT(std::string(CheckTokensFit(*data, 128256).message()),
             Contains("token 2147483646 at position 3, outside the model's vocabulary of 128256"));

  // The auto width: uint16 while every id is below 65536; kU32 on request.
  REQUIRE(WriteTokenFile(dir + "/small.bin", {0, 65535, 9}).ok());
  const std::string small = ReadAll(dir + "/small.bin");
  CHECK(small.size() == 1024 + 3 * 2);
  CHECK(IntAt(small, 0) == 20240520);
  CHECK(IntAt(small, 1) == 1);
  REQUIRE(WriteTokenFile(dir + "/one.bin", {65536}).ok());
  CHECK(ReadAll(dir + "/one.bin").size() == 1024 + 4);
  REQUIRE(WriteTokenFile(dir + "/wide.bin", {0, 65535, 9}, TokenWidth::kU32).ok());
  CHECK(ReadAll(dir + "/wide.bin").size() == 1024 + 3 * 4);
  auto wide = ReadTokenData(dir + "/wide.bin", DataFormat::kAuto);
  REQUIRE(wide.ok());
  CHECK(wide->tokens == std::vector<uint32_t>{0, 65535, 9});
  CHECK(WriteTokenFile(dir + "/empty16.bin", {}).ok());
  CHECK(ReadAll(dir + "/empty16.bin").size() == 1024);

  // The uint16 width refuses an id it cannot hold, and writes nothing.
  const Status narrow = WriteTokenFile(dir + "/narrow.bin", {1, 2, 70000, 65536}, TokenWidth::kU16);
  CHECK_THAT(std::string(narrow.message()), Contains("id 70000 at position 2"));
  CHECK_THAT(std::string(narrow.message()), Contains("uint16"));
  CHECK(absl::IsNotFound(ReadTokenData(dir + "/narrow.bin", DataFormat::kAuto).status()));
  // No width writes an id the reader would refuse.
  CHECK_THAT(std::string(WriteTokenFile(dir + "/huge.bin", {5, 2147483648u}).message()),
             Contains("id 2147483648 at position 1"));

  // Truncated, and trailing bytes: the error names the file, the sizes and the width.
  testing::WriteBytes(dir + "/cut.bin", bytes.substr(0, bytes.size() - 1));
  CHECK_THAT(std::string(ReadTokenData(dir + "/cut.bin", DataFormat::kAuto).status().message()),
             Contains("token file '" + dir +
                      "/cut.bin' has 1047 bytes but its header says 6 "
                      "tokens of 4 bytes, which need 1048 (truncated)"));
  testing::WriteBytes(dir + "/long.bin", bytes + "xy");
  CHECK_THAT(std::string(ReadTokenData(dir + "/long.bin", DataFormat::kLlmc).status().message()),
             Contains("1050 bytes but its header says 6 tokens of 4 bytes, which need 1048"));
  testing::WriteBytes(dir + "/empty.bin", "");
  CHECK_THAT(std::string(ReadTokenData(dir + "/empty.bin", DataFormat::kLlmc).status().message()),
             Contains("token file '" + dir + "/empty.bin' is empty (0 bytes"));

  // Each magic wants its own version.
  testing::WriteBytes(dir + "/v1.bin", TokenFileBytes<uint32_t>(20240801, 1, 2, {1, 2}));
  CHECK_THAT(std::string(ReadTokenData(dir + "/v1.bin", DataFormat::kAuto).status().message()),
             Contains("token file '" + dir +
                      "/v1.bin' has magic 20240801 (llm.c llama-3 (uint32 "
                      "tokens)) and version 1; that magic needs version 7"));
  testing::WriteBytes(dir + "/v7.bin", TokenFileBytes<uint16_t>(20240520, 7, 2, {1, 2}));
  CHECK_THAT(std::string(ReadTokenData(dir + "/v7.bin", DataFormat::kLlmc).status().message()),
             Contains("has magic 20240520 (llm.c GPT-2 (uint16 tokens)) and version 7; that "
                      "magic needs version 1"));
  testing::WriteBytes(dir + "/magic.bin", TokenFileBytes<uint32_t>(20240802, 7, 2, {1, 2}));
  CHECK_THAT(std::string(ReadTokenData(dir + "/magic.bin", DataFormat::kLlmc).status().message()),
             Contains("bad magic 20240802 (expected 20240520 for uint16 tokens or 20240801 for "
                      "uint32 tokens)"));

  // An id above INT32_MAX is an error naming its position and value, not a negative id.
  testing::WriteBytes(dir + "/sign.bin",
                      TokenFileBytes<uint32_t>(20240801, 7, 4, {7, 2147483647, 2147483648u, 1}));
  CHECK_THAT(std::string(ReadTokenData(dir + "/sign.bin", DataFormat::kAuto).status().message()),
             Contains("token file '" + dir +
                      "/sign.bin' holds id 2147483648 at position 2, "
                      "above 2147483647"));
  testing::WriteBytes(dir + "/max.bin", TokenFileBytes<uint32_t>(20240801, 7, 1, {4294967295u}));
  CHECK_THAT(std::string(ReadTokenData(dir + "/max.bin", DataFormat::kLlmc).status().message()),
             Contains("holds id 4294967295 at position 0"));

  // A GPT-2 file as llm.c writes it still reads, into 32-bit ids.
  testing::WriteBytes(dir + "/gpt2.bin",
                      TokenFileBytes<uint16_t>(20240520, 1, 5, {50256, 1, 65535, 0, 257}));
  auto old = ReadTokenData(dir + "/gpt2.bin", DataFormat::kAuto);
  REQUIRE(old.ok());
  CHECK(old->format == DataFormat::kLlmc);
  CHECK(old->tokens == std::vector<uint32_t>{50256, 1, 65535, 0, 257});
  CHECK(old->max_token == 65535);
}

TEST_CASE("evaluation rejects data that does not fit the model", "[formats]") {
  const std::string dir = testing::TempDir("eval_bad");
  const ModelConfig c = MakeConfig(1, 8, 2, 67, 8);
  const std::vector<float> params = RandomParams(c);
  REQUIRE(WriteCheckpoint(dir + "/m.bin", c, params.data()).ok());
  testing::WriteBytes(dir + "/text.txt", std::string(200, 'z'));  // 'z' = 122 >= V = 67
  EvalOptions eo;
  eo.checkpoint = dir + "/m.bin";
  eo.data = dir + "/text.txt";
  eo.backend = "cpu-ref";
  CHECK_THAT(std::string(EvaluateCheckpoint(eo).status().message()),
             Contains("outside the model's vocabulary of 67"));
  REQUIRE(WriteTokenFile(dir + "/few.bin", {1, 2, 3}).ok());
  eo.data = dir + "/few.bin";
  CHECK_THAT(std::string(EvaluateCheckpoint(eo).status().message()), Contains("needs at least"));
  eo.seq_len = 9;
  CHECK_THAT(std::string(EvaluateCheckpoint(eo).status().message()), Contains("context of 8"));
  eo.seq_len = 0;
  eo.backend = "tpu";
  REQUIRE(WriteTokenFile(dir + "/ok.bin", std::vector<uint32_t>(100, 5)).ok());
  eo.data = dir + "/ok.bin";
  CHECK_THAT(std::string(EvaluateCheckpoint(eo).status().message()), Contains("tpu"));
  eo.backend = "cpu-ref";
  auto ok = EvaluateCheckpoint(eo);
  REQUIRE(ok.ok());
  CHECK(ok->batches == 3);  // 99 / 8 = 12 windows = 3 batches of 4
}

}  // namespace
}  // namespace longhaul::model
