// Codec spec strings, proto-style stages and validation: canonical forms, round trips and
// error messages that name the offending part.
#include "compression/codec_spec.h"

#include <catch2/catch.hpp>

namespace longhaul::compression {
namespace {

CodecSpec Parse(std::string_view text) {
  auto spec = ParseCodecSpec(text);
  INFO(text << ": " << spec.status().ToString());
  REQUIRE(spec.ok());
  return *spec;
}

std::string ErrorOf(std::string_view text) {
  auto spec = ParseCodecSpec(text);
  REQUIRE_FALSE(spec.ok());
  return std::string(spec.status().message());
}

TEST_CASE("spec strings parse to the expected fields") {
  CodecSpec s = Parse("topk:0.01+q8+zstd");
  CHECK(s.topk.enabled);
  CHECK(s.topk.fraction == 0.01);
  CHECK_FALSE(s.topk.approximate);
  CHECK(s.value.format == ValueFormat::kQ8);
  CHECK(s.value.block == kDefaultBlock);
  CHECK(s.zstd.enabled);
  CHECK(s.zstd.level == kDefaultZstdLevel);

  s = Parse(" topk:k=0.1, approx + q4:block=128,asym,sr + zstd:level=-3 ");
  CHECK(s.topk.approximate);
  CHECK(s.topk.fraction == 0.1);
  CHECK(s.value.format == ValueFormat::kQ4);
  CHECK(s.value.block == 128);
  CHECK(s.value.asymmetric);
  CHECK(s.value.stochastic);
  CHECK(s.zstd.level == -3);

  CHECK(Parse("q2:32").value.block == 32);
  CHECK(Parse("zstd:9").zstd.level == 9);
  CHECK(Parse("zstd").value.format == ValueFormat::kFp32);  // fp32 implied
  CHECK(Parse("topk:0.5").value.format == ValueFormat::kFp32);
  CHECK(Parse("q8:asym=0").value.asymmetric == false);
  CHECK(Parse("fp32").lossless());
  CHECK(Parse("fp32+zstd").lossless());
  CHECK_FALSE(Parse("bf16").lossless());
}

TEST_CASE("ToString is canonical and parses back to the same spec") {
  for (std::string_view text :
       {"fp32", "fp16", "bf16", "q8", "q4:asym", "q2:block=256,asym,sr", "topk:0.01+q8+zstd",
        "topk:0.1,approx+bf16", "fp32+zstd:level=19", "topk:1+q4:block=8,sr+zstd:level=-7"}) {
    CodecSpec s = Parse(text);
    CHECK(s.ToString() == text);
    CHECK(Parse(s.ToString()) == s);
  }
  CHECK(Parse("zstd").ToString() == "fp32+zstd");
  CHECK(Parse("q8:block=64,asym=0").ToString() == "q8");
}

TEST_CASE("stages round trip and reject bad descriptors") {
  for (std::string_view text :
       {"fp32", "q4:asym", "topk:0.01,approx+q2:block=16,sr+zstd:level=7", "bf16+zstd"}) {
    CodecSpec s = Parse(text);
    auto back = FromStages(ToStages(s));
    REQUIRE(back.ok());
    CHECK(*back == s);
  }
  CHECK_FALSE(FromStages({}).ok());
  CHECK_FALSE(FromStages({{"q8", {{"block", 48}}}}).ok());
  CHECK_FALSE(FromStages({{"q8", {{"sr", 0.5}}}}).ok());
  CHECK_FALSE(FromStages({{"q8", {{"block", 64}, {"block", 64}}}}).ok());
  CHECK_FALSE(FromStages({{"zstd", {}}, {"q8", {}}}).ok());
  CHECK_FALSE(FromStages({{"topk", {{"k", std::nan("")}}}}).ok());
}

TEST_CASE("bad spec strings fail with messages that name the problem") {
  CHECK(ErrorOf("").find("empty") != std::string::npos);
  CHECK(ErrorOf("q9").find("unknown codec stage 'q9'") != std::string::npos);
  CHECK(ErrorOf("q8+topk:0.1").find("out of order") != std::string::npos);
  CHECK(ErrorOf("q8+q4").find("out of order or repeated") != std::string::npos);
  CHECK(ErrorOf("topk:0").find("(0, 1]") != std::string::npos);
  CHECK(ErrorOf("topk:1.5").find("(0, 1]") != std::string::npos);
  CHECK(ErrorOf("topk:k=nan").find("not a finite number") != std::string::npos);
  CHECK(ErrorOf("topk").find("(0, 1]") != std::string::npos);
  CHECK(ErrorOf("q8:block=48").find("power of two") != std::string::npos);
  CHECK(ErrorOf("q8:block=4").find("power of two") != std::string::npos);
  CHECK(ErrorOf("q8:block=64.5").find("integer") != std::string::npos);
  CHECK(ErrorOf("topk:nan").find("unknown parameter 'nan'") != std::string::npos);
  CHECK(ErrorOf("q8:foo").find("unknown parameter 'foo'") != std::string::npos);
  CHECK(ErrorOf("fp16:asym").find("unknown parameter 'asym'") != std::string::npos);
  CHECK(ErrorOf("q8:asym,asym").find("given twice") != std::string::npos);
  CHECK(ErrorOf("q8:asym,64").find("must be the first") != std::string::npos);
  CHECK(ErrorOf("zstd:level=30").find("[-7, 19]") != std::string::npos);
  CHECK(ErrorOf("q8++zstd").find("empty stage") != std::string::npos);
  CHECK(ErrorOf("q8:").find("empty argument") != std::string::npos);
  CHECK(ErrorOf(std::string(600, 'q')).find("at most") != std::string::npos);
}

TEST_CASE("TopKCount rounds and clamps") {
  TopKSpec t{true, 0.01, false};
  CHECK(TopKCount(t, 0) == 0);
  CHECK(TopKCount(t, 1) == 1);
  CHECK(TopKCount(t, 49) == 1);
  CHECK(TopKCount(t, 1000) == 10);
  CHECK(TopKCount(t, 1049) == 10);
  CHECK(TopKCount(t, 1051) == 11);
  t.fraction = 1;
  CHECK(TopKCount(t, 7) == 7);
}

}  // namespace
}  // namespace longhaul::compression
