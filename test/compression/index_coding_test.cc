// Index encodings: round trips, the size-based choice, and rejection of every malformed form
// (truncated or overlong varints, indices past n, bitmap padding and count mismatches).
#include "compression/index_coding.h"

#include <catch2/catch.hpp>
#include <random>
#include <set>

namespace longhaul::compression {
namespace {

std::vector<uint32_t> RandomIndices(uint64_t n, uint64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::set<uint32_t> s;
  while (s.size() < k) s.insert(static_cast<uint32_t>(rng() % n));
  return {s.begin(), s.end()};
}

std::vector<uint8_t> Encode(IndexEncoding e, const std::vector<uint32_t>& idx, uint64_t n) {
  std::vector<uint8_t> out(EncodedIndexSize(e, idx, n));
  EncodeIndices(e, idx, n, out.data());
  return out;
}

TEST_CASE("both encodings round trip and the smaller one is chosen") {
  for (uint64_t n : {1ull, 7ull, 8ull, 9ull, 1000ull, 100000ull, 4000000000ull}) {
    for (double fraction : {0.0, 0.001, 0.05, 0.2, 1.0}) {
      uint64_t k = static_cast<uint64_t>(fraction * std::min<uint64_t>(n, 100000));
      if (n > 1000000 && k > 1000) k = 1000;
      const auto idx = RandomIndices(n, k, n + k);
      for (IndexEncoding e : {IndexEncoding::kDeltaVarint, IndexEncoding::kBitmap}) {
        if (e == IndexEncoding::kBitmap && n > 1000000) continue;
        INFO("n=" << n << " k=" << k << " enc=" << static_cast<int>(e));
        const auto bytes = Encode(e, idx, n);
        std::vector<uint32_t> back(k);
        REQUIRE(DecodeIndices(e, bytes, n, back).ok());
        REQUIRE(back == idx);
      }
      const IndexEncoding chosen = ChooseIndexEncoding(idx, n);
      CHECK(EncodedIndexSize(chosen, idx, n) == std::min(DeltaVarintSize(idx), BitmapSize(n)));
    }
  }
  CHECK(ChooseIndexEncoding(RandomIndices(100000, 100, 1), 100000) == IndexEncoding::kDeltaVarint);
  CHECK(ChooseIndexEncoding(RandomIndices(100000, 30000, 1), 100000) == IndexEncoding::kBitmap);
}

TEST_CASE("malformed index bytes are rejected") {
  std::vector<uint32_t> out(2);
  // Truncated varint.
  CHECK_FALSE(
      DecodeIndices(IndexEncoding::kDeltaVarint, std::vector<uint8_t>{0x05, 0x80}, 100, out).ok());
  // Overlong varint (6 bytes).
  CHECK_FALSE(DecodeIndices(IndexEncoding::kDeltaVarint,
                            std::vector<uint8_t>{0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00}, 100,
                            out)
                  .ok());
  // Index past n (5 + 1 + 94 = 100).
  CHECK_FALSE(
      DecodeIndices(IndexEncoding::kDeltaVarint, std::vector<uint8_t>{5, 94}, 100, out).ok());
  CHECK(DecodeIndices(IndexEncoding::kDeltaVarint, std::vector<uint8_t>{5, 93}, 100, out).ok());
  CHECK(out == std::vector<uint32_t>{5, 99});
  // Trailing bytes.
  CHECK_FALSE(
      DecodeIndices(IndexEncoding::kDeltaVarint, std::vector<uint8_t>{5, 3, 0}, 100, out).ok());
  // More indices than positions.
  std::vector<uint32_t> many(11);
  CHECK_FALSE(
      DecodeIndices(IndexEncoding::kBitmap, std::vector<uint8_t>{0xff, 0x03}, 10, many).ok());
  // Bitmap: wrong length, padding bits, count mismatch.
  CHECK_FALSE(DecodeIndices(IndexEncoding::kBitmap, std::vector<uint8_t>{0x03}, 10, out).ok());
  CHECK_FALSE(
      DecodeIndices(IndexEncoding::kBitmap, std::vector<uint8_t>{0x01, 0x04}, 10, out).ok());
  CHECK_FALSE(
      DecodeIndices(IndexEncoding::kBitmap, std::vector<uint8_t>{0x07, 0x00}, 10, out).ok());
  CHECK_FALSE(
      DecodeIndices(IndexEncoding::kBitmap, std::vector<uint8_t>{0x01, 0x00}, 10, out).ok());
  CHECK(DecodeIndices(IndexEncoding::kBitmap, std::vector<uint8_t>{0x01, 0x02}, 10, out).ok());
  CHECK(out == std::vector<uint32_t>{0, 9});
  // Unknown encoding.
  CHECK_FALSE(DecodeIndices(static_cast<IndexEncoding>(7), {}, 10, out).ok());
}

}  // namespace
}  // namespace longhaul::compression
