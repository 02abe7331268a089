// Hugging Face safetensors files (model/safetensors.h): F32/BF16/F16 round trips, the fp32
// conversions checked bit by bit (ties to even, NaN, inf, fp16 subnormals; every fp16 and bf16
// pattern against an independent formula), sharded checkpoints through HfTensorSource, and
// hand-made hostile files, each of which must fail with an error that says what is wrong.
#include "model/safetensors.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "test/model/test_util.h"

namespace longhaul::model {
namespace {

using Catch::Matchers::Contains;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A safetensors file by hand: the length field (the header's size unless given), the header
// text, the data.
std::string StBytes(const std::string& header, const std::string& data = "",
                    uint64_t length = UINT64_MAX) {
  if (length == UINT64_MAX) length = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &length, 8);
  return out + header + data;
}

// The error of opening a file with `bytes`; fails the test if it opens.
std::string OpenError(const std::string& bytes, const std::string& dir) {
  const std::string path = dir + "/bad.safetensors";
  testing::WriteBytes(path, bytes);
  auto file = SafetensorsFile::Open(path);
  REQUIRE_FALSE(file.ok());
  const std::string message(file.status().message());
  CHECK_THAT(message, Contains(path));
  return message;
}

TEST_CASE("safetensors round-trips F32, BF16 and F16", "[safetensors]") {
  const std::string dir = testing::TempDir("st_roundtrip");
  const std::vector<float> f32 = {1.0f, -2.5f, 3.14159274f, 1e-30f, -0.0f, 6.5e30f};
  const std::vector<float> bf16 = {1.0f,
                                   -2.5f,
                                   0.15625f,
                                   FromBits(0x00010000),  // bf16 denormal
                                   std::numeric_limits<float>::infinity(),
                                   FromBits(0xff610000)};
  const std::vector<float> f16 = {1.0f,
                                  -2.0f,
                                  65504.0f,
                                  std::ldexp(1.0f, -24),
                                  std::ldexp(1023.0f, -24),
                                  std::ldexp(1.0f, -14),
                                  -std::numeric_limits<float>::infinity(),
                                  0.333251953125f};
  const float scalar = 7.0f;
  const std::vector<StTensor> tensors = {
      {"z.f32", StDtype::kF32, {2, 3}, f32.data()},    {"a.bf16", StDtype::kBF16, {6}, bf16.data()},
      {"m.f16", StDtype::kF16, {2, 2, 2}, f16.data()}, {"scalar", StDtype::kF32, {}, &scalar},
      {"empty", StDtype::kBF16, {0, 5}, nullptr},
  };
  const std::string path = dir + "/sub/model.safetensors";
  REQUIRE(WriteSafetensors(path, tensors, {{"format", "pt"}, {"step", "12"}}).ok());

  auto file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  const SafetensorsFile& st = **file;
  CHECK(st.names() == std::vector<std::string>{"a.bf16", "empty", "m.f16", "scalar", "z.f32"});
  CHECK(st.metadata() == std::map<std::string, std::string>{{"format", "pt"}, {"step", "12"}});
  CHECK(st.Has("m.f16"));
  CHECK_FALSE(st.Has("nope"));
  CHECK(st.Find("nope") == nullptr);
  const std::vector<float>* wants[] = {&f32, &bf16, &f16};
  for (int k = 0; k < 3; ++k) {
    const StTensor& t = tensors[k];
    const std::vector<float>& want = *wants[k];
    INFO(t.name);
    const StTensorInfo* info = st.Find(t.name);
    REQUIRE(info != nullptr);
    CHECK(info->dtype == StDtypeName(t.dtype));
    CHECK(info->float_dtype == t.dtype);
    CHECK(info->shape == t.shape);
    CHECK(info->num_elements == int64_t(want.size()));
    std::vector<float> got(want.size());
    REQUIRE(st.ReadFloats(t.name, got.data(), got.size()).ok());
    for (size_t i = 0; i < want.size(); ++i) CHECK(Bits(got[i]) == Bits(want[i]));
  }
  float s = 0;
  REQUIRE(st.ReadFloats("scalar", &s, 1).ok());
  CHECK(s == 7.0f);
  CHECK(st.Find("scalar")->num_elements == 1);
  CHECK(st.Find("empty")->num_elements == 0);
  CHECK(st.ReadFloats("empty", nullptr, 0).ok());

  // Layout: the header padded with spaces to 8 bytes, the data in the order given.
  const std::string bytes = ReadAll(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  const std::string header = bytes.substr(8, n);
  CHECK(header.find_last_not_of(' ') == header.rfind('}'));
  CHECK(st.Find("z.f32")->file_offset == int64_t(8 + n));
  CHECK(st.Find("a.bf16")->file_offset == int64_t(8 + n + 24));
  CHECK(st.Find("m.f16")->file_offset == int64_t(8 + n + 36));
  CHECK(st.Find("scalar")->file_offset == int64_t(8 + n + 52));
  CHECK(bytes.size() == 8 + n + 56);
}

TEST_CASE("fp32 to bf16 rounds to nearest even", "[safetensors]") {
  CHECK(FloatToBf16(1.0f) == 0x3f80);
  CHECK(FloatToBf16(FromBits(0x3f808000)) == 0x3f80);  // tie, down to even
  CHECK(FloatToBf16(FromBits(0x3f818000)) == 0x3f82);  // tie, up to even
  CHECK(FloatToBf16(FromBits(0x3f808001)) == 0x3f81);  // just above the tie
  CHECK(FloatToBf16(FromBits(0x3f807fff)) == 0x3f80);  // just below
  CHECK(FloatToBf16(-0.0f) == 0x8000);
  CHECK(FloatToBf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(FloatToBf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(FloatToBf16(std::numeric_limits<float>::max()) == 0x7f80);  // overflows to inf
  CHECK(FloatToBf16(FromBits(0x7f7f7fff)) == 0x7f7f);
  CHECK(FloatToBf16(FromBits(0x00008000)) == 0x0000);  // denormal tie
  for (uint32_t nan : {0x7f800001u, 0x7fc00000u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t h = FloatToBf16(FromBits(nan));  // truncating 0x7f800001 would give inf
    CHECK((h & 0x7f80) == 0x7f80);
    CHECK((h & 0x7f) != 0);
    CHECK((h & 0x8000) == ((nan >> 16) & 0x8000));
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = Bf16ToFloat(uint16_t(h));
    REQUIRE(Bits(f) == h << 16);
    if (!std::isnan(f)) REQUIRE(FloatToBf16(f) == h);
  }
}

TEST_CASE("fp32 to fp16 rounds to nearest even, fp16 converts exactly", "[safetensors]") {
  CHECK(FloatToFp16(1.0f) == 0x3c00);
  CHECK(FloatToFp16(-2.0f) == 0xc000);
  CHECK(FloatToFp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie, down to even
  CHECK(FloatToFp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie, up to even
  CHECK(FloatToFp16(65504.0f) == 0x7bff);
  CHECK(FloatToFp16(65519.0f) == 0x7bff);
  CHECK(FloatToFp16(65520.0f) == 0x7c00);  // the tie above the largest fp16 goes to inf
  CHECK(FloatToFp16(1e6f) == 0x7c00);
  CHECK(FloatToFp16(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(FloatToFp16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(FloatToFp16(std::ldexp(1.0f, -25)) == 0x0000);  // tie, down to zero
  CHECK(FloatToFp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(FloatToFp16(std::ldexp(3.0f, -25)) == 0x0002);                          // tie, up to even
  CHECK(FloatToFp16(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400);  // to normal
  CHECK(FloatToFp16(std::ldexp(1.0f, -14)) == 0x0400);
  CHECK(FloatToFp16(1e-30f) == 0x0000);
  CHECK(FloatToFp16(-1e-30f) == 0x8000);
  for (uint32_t nan : {0x7f800001u, 0x7fc00000u, 0xff800001u}) {
    const uint16_t h = FloatToFp16(FromBits(nan));
    CHECK((h & 0x7c00) == 0x7c00);
    CHECK((h & 0x3ff) != 0);
  }
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    const float f = Fp16ToFloat(uint16_t(h));
    if (exp == 0x1f) {
      REQUIRE((mant == 0 ? std::isinf(f) : std::isnan(f)));
      REQUIRE(std::signbit(f) == bool(sign));
      continue;
    }
    const double want = (sign ? -1 : 1) * (exp == 0 ? std::ldexp(double(mant), -24)
                                                    : std::ldexp(double(1024 + mant), exp - 25));
    REQUIRE(double(f) == want);
    REQUIRE(std::signbit(f) == bool(sign));
    REQUIRE(FloatToFp16(f) == h);
  }
}

TEST_CASE("values round on write: ties, NaN, inf", "[safetensors]") {
  const std::string dir = testing::TempDir("st_rounding");
  const float nan = FromBits(0x7f800001);
  const std::vector<float> in = {
      FromBits(0x3f808000), FromBits(0x3f818000), nan, 0.0f, std::ldexp(1.0f, -25) * 3, 70000.0f};
  const std::vector<StTensor> tensors = {{"b", StDtype::kBF16, {6}, in.data()},
                                         {"h", StDtype::kF16, {6}, in.data()}};
  REQUIRE(WriteSafetensors(dir + "/r.safetensors", tensors, {}).ok());
  auto file = SafetensorsFile::Open(dir + "/r.safetensors");
  REQUIRE(file.ok());
  CHECK((*file)->metadata().empty());
  std::vector<float> b(6), h(6);
  REQUIRE((*file)->ReadFloats("b", b.data(), 6).ok());
  REQUIRE((*file)->ReadFloats("h", h.data(), 6).ok());
  CHECK(b[0] == 1.0f);
  CHECK(b[1] == FromBits(0x3f820000));
  CHECK(std::isnan(b[2]));
  CHECK(std::isnan(h[2]));
  CHECK(h[0] == FromBits(0x3f808000));  // exact in fp16
  CHECK(h[4] == std::ldexp(2.0f, -24));
  CHECK(std::isinf(h[5]));
}

TEST_CASE("sharded checkpoints load lazily through HfTensorSource", "[safetensors]") {
  const std::string dir = testing::TempDir("st_sharded");
  const std::vector<float> w0 = {1, 2, 3, 4}, w1 = {5, 6}, w2 = {-1.5f, 0.25f, 8};
  REQUIRE(WriteSafetensors(dir + "/model-00001-of-00002.safetensors",
                           {{"h.0.w", StDtype::kF32, {2, 2}, w0.data()},
                            {"h.0.b", StDtype::kBF16, {2}, w1.data()}},
                           {{"format", "pt"}})
              .ok());
  REQUIRE(WriteSafetensors(dir + "/model-00002-of-00002.safetensors",
                           {{"h.1.w", StDtype::kF16, {3}, w2.data()}}, {})
              .ok());
  const std::map<std::string, std::string> weight_map = {
      {"h.0.w", "model-00001-of-00002.safetensors"},
      {"h.0.b", "model-00001-of-00002.safetensors"},
      {"h.1.w", "model-00002-of-00002.safetensors"}};
  const std::string index = dir + "/model.safetensors.index.json";
  REQUIRE(WriteSafetensorsIndex(index, 26, weight_map).ok());
  CHECK_THAT(ReadAll(index), Contains("{\n  \"metadata\": {\n    \"total_size\": 26\n  },\n"
                                      "  \"weight_map\": {\n    \"h.0.b\": \"model-00001"));
  auto read_map = ReadSafetensorsIndex(index);
  REQUIRE(read_map.ok());
  CHECK(*read_map == weight_map);

  // Shard 2 broken: what lives in shard 1 still loads, since shard 2 is never opened.
  const std::string shard2 = ReadAll(dir + "/model-00002-of-00002.safetensors");
  testing::WriteBytes(dir + "/model-00002-of-00002.safetensors", "garbage");
  auto source = HfTensorSource::Open(dir);
  REQUIRE(source.ok());
  const HfTensorSource& src = **source;
  CHECK(src.names() == std::vector<std::string>{"h.0.b", "h.0.w", "h.1.w"});
  CHECK(src.Has("h.1.w"));
  CHECK_FALSE(src.Has("h.2.w"));
  std::vector<float> got(4);
  REQUIRE(src.ReadFloats("h.0.w", got.data(), 4).ok());
  CHECK(got == w0);
  auto info = src.Find("h.0.b");
  REQUIRE(info.ok());
  CHECK((*info)->dtype == "BF16");
  const Status broken = src.ReadFloats("h.1.w", got.data(), 3);
  CHECK_THAT(std::string(broken.message()), Contains("model-00002-of-00002.safetensors"));
  CHECK_THAT(std::string(broken.message()), Contains("shorter than its 8-byte header length"));
  // Once mended, the shard opens (a failed open is not cached).
  testing::WriteBytes(dir + "/model-00002-of-00002.safetensors", shard2);
  REQUIRE(src.ReadFloats("h.1.w", got.data(), 3).ok());
  CHECK(std::vector<float>(got.begin(), got.begin() + 3) == w2);
  const Status missing = src.ReadFloats("h.2.w", got.data(), 3);
  CHECK(absl::IsNotFound(missing));
  CHECK_THAT(std::string(missing.message()), Contains("'h.2.w'"));

  // A single model.safetensors wins over an index.
  REQUIRE(WriteSafetensors(dir + "/model.safetensors", {{"x", StDtype::kF32, {1}, w0.data()}}, {})
              .ok());
  auto single = HfTensorSource::Open(dir);
  REQUIRE(single.ok());
  CHECK((*single)->names() == std::vector<std::string>{"x"});
  REQUIRE((*single)->ReadFloats("x", got.data(), 1).ok());
  CHECK(got[0] == 1.0f);

  auto none = HfTensorSource::Open(dir + "/nothing_here");
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(std::string(none.status().message()), Contains(dir + "/nothing_here"));
}

TEST_CASE("hostile indexes give clear errors", "[safetensors]") {
  const std::string dir = testing::TempDir("st_bad_index");
  const std::string index = dir + "/model.safetensors.index.json";
  auto error = [&](const std::string& text) {
    testing::WriteBytes(index, text);
    auto map = ReadSafetensorsIndex(index);
    REQUIRE_FALSE(map.ok());
    const std::string message(map.status().message());
    CHECK_THAT(message, Contains(index));
    return message;
  };
  for (const char* name :
       {"../x.safetensors", "sub/x.safetensors", "", "x.bin", "/x.safetensors"}) {
    const std::string m = error(std::string(R"({"weight_map": {"w": ")") + name + "\"}}");
    CHECK_THAT(m, Contains("tensor 'w'"));
    CHECK_THAT(m, Contains("plain file name"));
  }
  CHECK_THAT(error(R"({"weight_map": {"w": 3}})"), Contains("not a string"));
  CHECK_THAT(error(R"({"metadata": {}})"), Contains("no \"weight_map\""));
  CHECK_THAT(error(R"({"weight_map": {"w": "a.safetensors")"), Contains("not valid JSON"));
  CHECK_THAT(error("[]"), Contains("not an object"));
  CHECK_FALSE(WriteSafetensorsIndex(index, 0, {{"w", "../x.safetensors"}}).ok());

  // An index naming a tensor that is not in its shard.
  const float one = 1;
  REQUIRE(WriteSafetensors(dir + "/a.safetensors", {{"w", StDtype::kF32, {1}, &one}}, {}).ok());
  REQUIRE(WriteSafetensorsIndex(index, 4, {{"w", "a.safetensors"}, {"v", "a.safetensors"}}).ok());
  auto source = HfTensorSource::Open(dir);
  REQUIRE(source.ok());
  CHECK((*source)->Find("w").ok());
  auto v = (*source)->Find("v");
  REQUIRE_FALSE(v.ok());
  CHECK_THAT(std::string(v.status().message()), Contains("tensor 'v' in 'a.safetensors'"));
}

TEST_CASE("hostile safetensors files give clear errors", "[safetensors]") {
  const std::string dir = testing::TempDir("st_bad");
  const std::string d8(8, '\0');
  auto one = [](const std::string& entry) { return std::string(R"({"w": )") + entry + "}"; };

  CHECK_THAT(OpenError("abc", dir), Contains("shorter than its 8-byte header length"));
  CHECK_THAT(OpenError(StBytes("{}", "", 100), dir),
             Contains("header length 100 is more than the 2 bytes"));
  CHECK_THAT(OpenError(StBytes("{}", "", uint64_t{1} << 63), dir),
             Contains("header length 9223372036854775808"));
  const std::string truncated = OpenError(StBytes(R"({"w": {"dtype": "F32")"), dir);
  CHECK_THAT(truncated, Contains("not valid JSON (byte "));
  CHECK_THAT(truncated, Contains(" of 21): [json.exception.parse_error"));
  CHECK_THAT(OpenError(StBytes("[1, 2]"), dir), Contains("header is a JSON array, not an object"));
  CHECK_THAT(OpenError(StBytes(one(R"({"shape": [1], "data_offsets": [0, 4]})"), d8), dir),
             Contains("tensor 'w' has no \"dtype\""));
  CHECK_THAT(OpenError(StBytes(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, 4],
                                     "x": 1})"),
                               d8),
                       dir),
             Contains("tensor 'w' has an unexpected key \"x\""));
  CHECK_THAT(
      OpenError(StBytes(one(R"({"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]})"), d8), dir),
      Contains("tensor 'w' has unknown dtype 'Q7'"));
  CHECK_THAT(
      OpenError(StBytes(one(R"({"dtype": 32, "shape": [1], "data_offsets": [0, 4]})"), d8), dir),
      Contains("\"dtype\" is not a string"));
  CHECK_THAT(
      OpenError(StBytes(one(R"({"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 4]})"), d8),
                dir),
      Contains("tensor 'w': shape dimension 0 (-1) is not a non-negative"));
  CHECK_THAT(
      OpenError(StBytes(one(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})"), d8),
                dir),
      Contains("shape dimension 0 (1.5)"));
  CHECK_THAT(
      OpenError(StBytes(one(R"({"dtype": "F32", "shape": 4, "data_offsets": [0, 4]})"), d8), dir),
      Contains("\"shape\" is not an array"));
  CHECK_THAT(OpenError(StBytes(one(R"({"dtype": "F32", "shape": [4611686018427387904, 4],
                                     "data_offsets": [0, 0]})")),
                       dir),
             Contains("tensor 'w': shape [4611686018427387904, 4] multiplies out to 2^63"));
  CHECK_THAT(OpenError(StBytes(one(R"({"dtype": "F32", "shape": [4294967296, 4294967296, 0],
                                     "data_offsets": [0, 0]})")),
                       dir),
             Contains("multiplies out to 2^63"));
  // 2^62 elements of 4 bytes: 2^64 bytes, which a 64-bit product would wrap to 0.
  CHECK_THAT(OpenError(StBytes(one(R"({"dtype": "F32", "shape": [4611686018427387904],
                                     "data_offsets": [0, 0]})")),
                       dir),
             Contains("needs 18446744073709551616 bytes but data_offsets [0, 0] hold 0"));
  CHECK_THAT(
      OpenError(StBytes(one(R"({"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})"), d8),
                dir),
      Contains("tensor 'w': data_offsets [0, 16] are not a range inside the 8 bytes"));
  CHECK_THAT(
      OpenError(StBytes(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]})"), d8), dir),
      Contains("data_offsets [8, 4]"));
  CHECK_THAT(
      OpenError(StBytes(one(R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})"), d8), dir),
      Contains("is not two non-negative integers"));
  CHECK_THAT(
      OpenError(StBytes(one(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})"), d8), dir),
      Contains("tensor 'w': shape [3] of F32 needs 12 bytes but data_offsets [0, 8] hold 8"));
  CHECK_THAT(OpenError(StBytes(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                   "b": {"dtype": "BF16", "shape": [2], "data_offsets": [4, 8]}})",
                               d8),
                       dir),
             Contains("tensors 'a' [0, 8) and 'b' [4, 8) overlap"));
  CHECK_THAT(OpenError(StBytes(R"({"__metadata__": {"k": 1}})"), dir),
             Contains("metadata value 'k' is a number, not a string"));
  CHECK_THAT(OpenError(StBytes(R"({"__metadata__": [1]})"), dir), Contains("\"__metadata__\""));
  CHECK_THAT(OpenError(StBytes(R"({"w": {}, "w": {}})"), dir), Contains("key 'w' twice"));
  CHECK_THAT(OpenError(StBytes(std::string(100000, '[')), dir),
             Contains("nests deeper than 64 levels (byte 64)"));
  CHECK_THAT(OpenError(StBytes("{\"w\": \"\xff\"}"), dir), Contains("not valid JSON"));

  // Dtypes that are not float open, and fail when read as float.
  const std::string path = dir + "/ints.safetensors";
  testing::WriteBytes(path,
                      StBytes(R"({"ids": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]},
                        "bits": {"dtype": "F4", "shape": [3, 2], "data_offsets": [8, 11]}})",
                              d8 + "abc"));
  auto file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  CHECK((*file)->Find("ids")->dtype == "I64");
  CHECK_FALSE((*file)->Find("ids")->float_dtype.has_value());
  float out[8] = {};
  const Status as_float = (*file)->ReadFloats("ids", out, 1);
  CHECK_THAT(std::string(as_float.message()), Contains(path));
  CHECK_THAT(std::string(as_float.message()), Contains("tensor 'ids' has dtype I64"));
  CHECK_THAT(std::string((*file)->ReadFloats("nope", out, 1).message()),
             Contains("has no tensor 'nope'"));
  const std::string good = dir + "/good.safetensors";
  REQUIRE(WriteSafetensors(good, {{"w", StDtype::kF32, {2}, out}}, {}).ok());
  auto g = SafetensorsFile::Open(good);
  REQUIRE(g.ok());
  CHECK_THAT(std::string((*g)->ReadFloats("w", out, 3).message()),
             Contains("tensor 'w' has 2 elements [2], not 3"));

  // The writer refuses what a reader could not tell apart.
  CHECK_THAT(
      std::string(WriteSafetensors(
                      good, {{"w", StDtype::kF32, {1}, out}, {"w", StDtype::kF32, {1}, out}}, {})
                      .message()),
      Contains("tensor 'w' twice"));
  CHECK_FALSE(WriteSafetensors(good, {{"", StDtype::kF32, {1}, out}}, {}).ok());
  CHECK_FALSE(WriteSafetensors(good, {{"__metadata__", StDtype::kF32, {1}, out}}, {}).ok());
  CHECK_FALSE(WriteSafetensors(good, {{"w", StDtype::kF32, {-1}, out}}, {}).ok());
  CHECK_FALSE(WriteSafetensors(good, {{"w\xff", StDtype::kF32, {1}, out}}, {}).ok());
  REQUIRE(SafetensorsFile::Open(good).ok());  // the failed writes left the file alone
}

}  // namespace
}  // namespace longhaul::model
