// libFuzzer target for the compression wire format. Built by fuzz_frame.sh with clang and
// -fsanitize=fuzzer,address,undefined (Bazel's toolchain here is gcc, without libFuzzer).
//
// The first input byte picks what the rest is fed to:
//   0     DecodeFrame as is (most mutants stop at the checksum, as real corruption would)
//   1, 2  DecodeFrame after rewriting the checksum, to reach every check behind it
//   3     ParseCodecSpec, then a round trip of a small tensor through the parsed codec
// Invariants beyond "no crash, no sanitizer report": a decoded frame has exactly
// element_count finite values, its header alone parses (ParseFrameHeaderPrefix) to the same
// fields, and it re-encodes with its own codec; a parsed spec prints and
// describes itself back to the same spec.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "compression/frame.h"

namespace longhaul::compression {
namespace {

#define FUZZ_CHECK(cond)                                             \
  do {                                                               \
    if (!(cond)) {                                                   \
      std::fprintf(stderr, "fuzz_frame: check failed: %s\n", #cond); \
      std::abort();                                                  \
    }                                                                \
  } while (0)

constexpr uint64_t kMaxElements = uint64_t{1} << 16;

void FuzzFrame(std::vector<uint8_t> frame, bool fix_checksum) {
  if (fix_checksum) RecomputeFrameChecksum(frame);
  FrameLimits limits;
  limits.max_elements = kMaxElements;
  const bool prefix_ok = ParseFrameHeaderPrefix(frame, limits).ok();
  auto decoded = DecodeFrame(frame, limits);
  if (!decoded.ok()) return;
  // What a receiver admits on a frame's first bytes agrees with the whole frame's header.
  FUZZ_CHECK(prefix_ok);
  const FrameHeader& h = decoded->header;
  auto head = ParseFrameHeaderPrefix(std::span<const uint8_t>(frame).first(h.header_size), limits);
  FUZZ_CHECK(head.ok() && head->shape == h.shape && head->spec == h.spec &&
             head->payload_size == h.payload_size && head->element_count == h.element_count);
  FUZZ_CHECK(decoded->values.size() == decoded->header.element_count);
  for (float v : decoded->values) FUZZ_CHECK(std::isfinite(v));
  auto codec = MakeCodec(decoded->header.spec);
  FUZZ_CHECK(codec.ok());
  std::vector<uint8_t> again;
  FUZZ_CHECK(EncodeFrame(**codec, decoded->values, decoded->header.shape, {}, &again).ok());
  FUZZ_CHECK(DecodeFrame(again, limits).ok());
}

void FuzzSpec(std::string_view text) {
  auto spec = ParseCodecSpec(text);
  if (!spec.ok()) return;
  auto reparsed = ParseCodecSpec(spec->ToString());
  FUZZ_CHECK(reparsed.ok() && *reparsed == *spec);
  auto from_stages = FromStages(ToStages(*spec));
  FUZZ_CHECK(from_stages.ok() && *from_stages == *spec);
  auto codec = MakeCodec(*spec);
  FUZZ_CHECK(codec.ok());
  std::vector<float> x(97);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 100.0f;
  std::vector<uint8_t> encoded;
  FUZZ_CHECK((*codec)->Encode(x, {}, &encoded).ok());
  std::vector<float> y(x.size());
  FUZZ_CHECK((*codec)->Decode(encoded, y).ok());
}

// Seed frames for the corpus: one per codec family, in modes 0 and 1, plus spec strings.
void WriteSeeds(const char* dir) {
  int n = 0;
  auto write = [&](uint8_t mode, const std::vector<uint8_t>& body) {
    std::string path = std::string(dir) + "/seed-" + std::to_string(n++);
    FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) return;
    std::fputc(mode, f);
    std::fwrite(body.data(), 1, body.size(), f);
    std::fclose(f);
  };
  std::vector<float> x(60);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(static_cast<float>(i) * 0.3f) * 10.0f;
  const std::vector<int64_t> shape = {6, 10};
  for (const char* spec :
       {"fp32", "fp16", "bf16", "q8", "q4:block=32,asym", "q2:block=8,sr", "topk:0.1+q8",
        "topk:0.5,approx+bf16", "topk:0.05+fp32+zstd", "q4+zstd:level=1", "fp32+zstd"}) {
    auto codec = MakeCodec(spec);
    if (!codec.ok()) continue;
    std::vector<uint8_t> frame;
    if (!EncodeFrame(**codec, x, shape, {}, &frame).ok()) continue;
    write(0, frame);
    write(1, frame);
    write(3, std::vector<uint8_t>(spec, spec + std::string_view(spec).size()));
  }
}

}  // namespace
}  // namespace longhaul::compression

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("LONGHAUL_FUZZ_SEED_DIR")) {
    longhaul::compression::WriteSeeds(dir);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 4;
  std::vector<uint8_t> rest(data + 1, data + size);
  if (mode == 3) {
    longhaul::compression::FuzzSpec(
        std::string_view(reinterpret_cast<const char*>(rest.data()), rest.size()));
  } else {
    longhaul::compression::FuzzFrame(std::move(rest), mode != 0);
  }
  return 0;
}
