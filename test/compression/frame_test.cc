// The wire format: frames round trip with their codec, shape and sizes; every truncation and
// every single-bit corruption is rejected; header fields that pass the checksum but lie are
// rejected with errors naming them; and random mutations never crash (a small in-process
// fuzz run that complements fuzz_frame.sh in every `bazel test`).
#include "compression/frame.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <random>

#include "test/compression/test_util.h"

namespace longhaul::compression {
namespace {

using testing::InputKind;
using testing::MakeInput;

std::vector<uint8_t> Frame(std::string_view spec, std::span<const float> x,
                           std::vector<int64_t> shape) {
  auto codec = MakeCodec(spec);
  REQUIRE(codec.ok());
  std::vector<uint8_t> frame;
  Status s = EncodeFrame(**codec, x, shape, {}, &frame);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return frame;
}

std::string DecodeError(std::span<const uint8_t> frame, const FrameLimits& limits = {}) {
  auto decoded = DecodeFrame(frame, limits);
  REQUIRE_FALSE(decoded.ok());
  return std::string(decoded.status().message());
}

template <typename T>
void Poke(std::vector<uint8_t>* frame, size_t offset, T value) {
  std::memcpy(frame->data() + offset, &value, sizeof(T));
  RecomputeFrameChecksum(*frame);
}

TEST_CASE("frames round trip codec, shape and values") {
  const auto x = MakeInput(InputKind::kGaussian, 2 * 3 * 50, 1);
  for (std::string_view spec :
       {"fp32", "bf16", "q4:block=32,asym,sr", "topk:0.1,approx+q8+zstd", "fp32+zstd:level=-5"}) {
    const auto frame = Frame(spec, x, {2, 3, 50});
    auto decoded = DecodeFrame(frame);
    INFO(spec << ": " << decoded.status().ToString());
    REQUIRE(decoded.ok());
    CHECK(decoded->header.spec.ToString() == spec);
    CHECK(decoded->header.shape == std::vector<int64_t>{2, 3, 50});
    CHECK(decoded->header.element_count == 300);
    CHECK(decoded->header.raw_size == 1200);
    CHECK(decoded->header.header_size == FrameHeaderSize(3));
    CHECK(decoded->header.payload_size == frame.size() - FrameHeaderSize(3));
    CHECK(decoded->values.size() == 300);
  }
  // Scalars and empty tensors.
  const float one = 1.5f;
  auto scalar = DecodeFrame(Frame("fp32", std::span(&one, 1), {}));
  REQUIRE(scalar.ok());
  CHECK(scalar->header.shape.empty());
  CHECK(scalar->values == std::vector<float>{1.5f});
  for (std::string_view spec : {"fp32", "q2", "topk:0.5+q8+zstd"}) {
    auto empty = DecodeFrame(Frame(spec, {}, {4, 0, 7}));
    REQUIRE(empty.ok());
    CHECK(empty->values.empty());
  }
}

TEST_CASE("EncodeFrame checks the shape") {
  auto codec = MakeCodec("fp32");
  REQUIRE(codec.ok());
  std::vector<float> x(6);
  std::vector<uint8_t> frame;
  CHECK_FALSE(EncodeFrame(**codec, x, std::vector<int64_t>{2, 4}, {}, &frame).ok());
  CHECK_FALSE(EncodeFrame(**codec, x, std::vector<int64_t>{-2, -3}, {}, &frame).ok());
  CHECK_FALSE(EncodeFrame(**codec, x, std::vector<int64_t>(9, 1), {}, &frame).ok());
  CHECK_FALSE(
      EncodeFrame(**codec, x, std::vector<int64_t>{int64_t{1} << 62, 1 << 4}, {}, &frame).ok());
  CHECK(EncodeFrame(**codec, x, std::vector<int64_t>{1, 2, 3}, {}, &frame).ok());
}

TEST_CASE("a frame's first bytes give its header before the rest has arrived") {
  const auto x = MakeInput(InputKind::kGaussian, 2 * 3 * 50, 4);
  const auto frame = Frame("topk:0.1+q8+zstd", x, {2, 3, 50});
  const size_t header = FrameHeaderSize(3);
  auto whole = ParseFrameHeader(frame);
  REQUIRE(whole.ok());
  // The header alone, or the header and part of the payload: the same fields, unchecked sizes
  // and checksum (those need the whole frame).
  for (size_t len : {header, header + 1, frame.size() - 1, frame.size()}) {
    INFO("first " << len << " bytes");
    auto head = ParseFrameHeaderPrefix(std::span(frame).first(len));
    REQUIRE(head.ok());
    CHECK(head->shape == whole->shape);
    CHECK(head->spec == whole->spec);
    CHECK(head->payload_size == whole->payload_size);
    CHECK(head->raw_size == 1200);
    CHECK(head->header_size == header);
  }
  // Fewer bytes than the header: refused, naming the field that did not fit.
  for (size_t len = 0; len < header; ++len) {
    INFO("first " << len << " bytes");
    CHECK_FALSE(ParseFrameHeaderPrefix(std::span(frame).first(len)).ok());
  }
  // A flipped payload byte passes the prefix (it cannot see the checksum fail), not the whole.
  auto bad = frame;
  bad[header + 3] ^= 1;
  CHECK(ParseFrameHeaderPrefix(bad).ok());
  CHECK_FALSE(ParseFrameHeader(bad).ok());
  // Lying fields and limits are refused as ParseFrameHeader refuses them.
  FrameLimits small;
  small.max_elements = 299;
  CHECK_FALSE(ParseFrameHeaderPrefix(frame, small).ok());
  auto lying = frame;
  Poke<uint8_t>(&lying, 6, 200);  // an unknown value format
  auto r = ParseFrameHeaderPrefix(lying);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("unknown value format 200"));
}

TEST_CASE("every truncation and every bit flip is rejected") {
  const auto x = MakeInput(InputKind::kGaussian, 100, 2);
  for (std::string_view spec : {"q8", "topk:0.2+q4+zstd"}) {
    const auto frame = Frame(spec, x, {10, 10});
    for (size_t len = 0; len < frame.size(); ++len) {
      INFO(spec << " truncated to " << len);
      CHECK_FALSE(DecodeFrame(std::span(frame).first(len)).ok());
    }
    for (size_t byte = 0; byte < frame.size(); ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        auto bad = frame;
        bad[byte] ^= static_cast<uint8_t>(1 << bit);
        INFO(spec << " flipped byte " << byte << " bit " << bit);
        CHECK_FALSE(DecodeFrame(bad).ok());
      }
    }
  }
}

TEST_CASE("lying header fields are rejected by name, even with a valid checksum") {
  const auto x = MakeInput(InputKind::kGaussian, 64, 3);
  const auto good = Frame("q8", x, {8, 8});
  auto f = good;
  Poke<uint8_t>(&f, 4, 2);
  CHECK(DecodeError(f).find("unsupported version 2") != std::string::npos);
  f = good;
  f[0] = 'X';
  CHECK(DecodeError(f).find("magic") != std::string::npos);
  f = good;
  Poke<uint8_t>(&f, 5, 9);
  CHECK(DecodeError(f).find("dimensions") != std::string::npos);
  f = good;
  Poke<uint8_t>(&f, 6, 7);
  CHECK(DecodeError(f).find("unknown value format 7") != std::string::npos);
  f = good;
  Poke<uint8_t>(&f, 7, 0x20);
  CHECK(DecodeError(f).find("unknown flags") != std::string::npos);
  f = good;
  Poke<uint32_t>(&f, 8, 48);
  CHECK(DecodeError(f).find("power of two") != std::string::npos);
  f = good;
  Poke<uint32_t>(&f, 12, 3);
  CHECK(DecodeError(f).find("zstd level 3 set without zstd") != std::string::npos);
  f = good;
  Poke<double>(&f, 16, 0.5);
  CHECK(DecodeError(f).find("top-k") != std::string::npos);
  f = good;
  Poke<uint64_t>(&f, 24, 65);
  CHECK(DecodeError(f).find("do not multiply") != std::string::npos);
  f = good;
  Poke<uint64_t>(&f, 32, 4);
  CHECK(DecodeError(f).find("raw size") != std::string::npos);
  f = good;
  Poke<uint64_t>(&f, 40, 1);
  CHECK(DecodeError(f).find("payload bytes") != std::string::npos);
  f = good;
  Poke<int64_t>(&f, 48, -8);
  CHECK(DecodeError(f).find("negative dimension") != std::string::npos);
  // Switching the codec to fp32 makes the payload the wrong size for 64 values.
  f = good;
  Poke<uint8_t>(&f, 6, 1);
  Poke<uint32_t>(&f, 8, 0);
  CHECK(DecodeError(f).find("fp32") != std::string::npos);
  // Element-count limits apply before any allocation.
  FrameLimits tight;
  tight.max_elements = 63;
  CHECK(DecodeError(good, tight).find("limit") != std::string::npos);
  f = good;
  Poke<int64_t>(&f, 48, int64_t{1} << 40);
  Poke<int64_t>(&f, 56, int64_t{1} << 40);
  CHECK(DecodeError(f).find("limit") != std::string::npos);
}

TEST_CASE("hostile payloads behind a valid header are rejected") {
  const auto x = MakeInput(InputKind::kGaussian, 1000, 4);
  // q8: a NaN scale.
  auto f = Frame("q8", x, {1000});
  const size_t payload = FrameHeaderSize(1);
  const float nan = std::nanf("");
  std::memcpy(f.data() + payload + 4, &nan, 4);
  RecomputeFrameChecksum(f);
  CHECK(DecodeError(f).find("block 1") != std::string::npos);
  // fp32: an infinity.
  f = Frame("fp32", x, {1000});
  const float inf = INFINITY;
  std::memcpy(f.data() + payload + 4 * 17, &inf, 4);
  RecomputeFrameChecksum(f);
  CHECK(DecodeError(f).find("index 17") != std::string::npos);
  // topk: k larger than the tensor.
  f = Frame("topk:0.01+fp32", x, {1000});
  Poke<uint64_t>(&f, payload, 1001);
  CHECK(DecodeError(f).find("exceeds") != std::string::npos);
  // zstd: a declared size past the cap, and a corrupt frame.
  f = Frame("q8+zstd", x, {1000});
  Poke<uint64_t>(&f, payload, uint64_t{1} << 40);
  CHECK(DecodeError(f).find("at most") != std::string::npos);
  f = Frame("q8+zstd", x, {1000});
  f[payload + 8] ^= 0x55;  // the zstd magic number
  RecomputeFrameChecksum(f);
  CHECK_FALSE(DecodeFrame(f).ok());
}

TEST_CASE("random mutations with a recomputed checksum never crash") {
  std::mt19937_64 rng(42);
  const auto x = MakeInput(InputKind::kGaussian, 256, 5);
  std::vector<std::vector<uint8_t>> seeds;
  for (std::string_view spec : {"fp32", "fp16", "bf16", "q8:asym", "q4:sr", "q2:block=8",
                                "topk:0.05+q8", "topk:0.5+bf16+zstd", "q4+zstd"}) {
    seeds.push_back(Frame(spec, x, {16, 16}));
  }
  int decoded_ok = 0;
  for (int iter = 0; iter < 30000; ++iter) {
    auto f = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (rng() % 4) {
        case 0:
          f[rng() % f.size()] = static_cast<uint8_t>(rng());
          break;
        case 1:
          f.resize(rng() % (f.size() + 1));
          break;
        case 2:
          f.insert(f.begin() + static_cast<std::ptrdiff_t>(rng() % (f.size() + 1)),
                   static_cast<uint8_t>(rng()));
          break;
        default:
          if (f.size() > 56) f[48 + rng() % 8] = static_cast<uint8_t>(rng());
          break;
      }
      if (f.empty()) break;
    }
    if (rng() % 8 != 0) RecomputeFrameChecksum(f);
    auto decoded = DecodeFrame(f);
    if (decoded.ok()) {
      ++decoded_ok;
      REQUIRE(decoded->values.size() == decoded->header.element_count);
      for (float v : decoded->values) REQUIRE(std::isfinite(v));
    }
  }
  INFO("mutants that still decoded: " << decoded_ok);
  CHECK(decoded_ok > 0);
}

}  // namespace
}  // namespace longhaul::compression
