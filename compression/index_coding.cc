// Delta-varint and bitmap index encodings (see index_coding.h).
#include "compression/index_coding.h"

#include <bit>
#include <cstring>

#include "compression/strings.h"

namespace longhaul::compression {
namespace {

int VarintSize(uint32_t v) {
  int size = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++size;
  }
  return size;
}

uint32_t Gap(std::span<const uint32_t> indices, size_t i) {
  return i == 0 ? indices[0] : indices[i] - indices[i - 1] - 1;
}

}  // namespace

uint64_t DeltaVarintSize(std::span<const uint32_t> indices) {
  uint64_t size = 0;
  for (size_t i = 0; i < indices.size(); ++i) size += VarintSize(Gap(indices, i));
  return size;
}

IndexEncoding ChooseIndexEncoding(std::span<const uint32_t> indices, uint64_t n) {
  // Every gap takes at least one byte, so past n/8 indices the bitmap always wins.
  if (indices.size() > BitmapSize(n)) return IndexEncoding::kBitmap;
  return DeltaVarintSize(indices) <= BitmapSize(n) ? IndexEncoding::kDeltaVarint
                                                   : IndexEncoding::kBitmap;
}

uint64_t EncodedIndexSize(IndexEncoding encoding, std::span<const uint32_t> indices, uint64_t n) {
  return encoding == IndexEncoding::kBitmap ? BitmapSize(n) : DeltaVarintSize(indices);
}

void EncodeIndices(IndexEncoding encoding, std::span<const uint32_t> indices, uint64_t n,
                   uint8_t* out) {
  if (encoding == IndexEncoding::kBitmap) {
    std::memset(out, 0, BitmapSize(n));
    for (uint32_t i : indices) out[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
    return;
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    uint32_t v = Gap(indices, i);
    while (v >= 0x80) {
      *out++ = static_cast<uint8_t>(v | 0x80);
      v >>= 7;
    }
    *out++ = static_cast<uint8_t>(v);
  }
}

Status DecodeIndices(IndexEncoding encoding, std::span<const uint8_t> in, uint64_t n,
                     std::span<uint32_t> out) {
  const uint64_t k = out.size();
  if (k > n) {
    return absl::InvalidArgumentError(Cat("indices: ", k, " indices out of ", n, " positions"));
  }
  if (encoding == IndexEncoding::kBitmap) {
    if (in.size() != BitmapSize(n)) {
      return absl::InvalidArgumentError(Cat("indices: bitmap of ", in.size(), " bytes for ", n,
                                            " positions; expected ", BitmapSize(n)));
    }
    if (n % 8 != 0 && (in.back() >> (n % 8)) != 0) {
      return absl::InvalidArgumentError("indices: bitmap has bits set past the last position");
    }
    uint64_t count = 0;
    for (size_t byte = 0; byte < in.size(); ++byte) {
      uint32_t bits = in[byte];
      while (bits != 0) {
        if (count == k) {
          return absl::InvalidArgumentError(Cat("indices: bitmap has more than ", k, " bits set"));
        }
        out[count++] = static_cast<uint32_t>(8 * byte + std::countr_zero(bits));
        bits &= bits - 1;
      }
    }
    if (count != k) {
      return absl::InvalidArgumentError(
          Cat("indices: bitmap has ", count, " bits set; expected ", k));
    }
    return absl::OkStatus();
  }
  if (encoding != IndexEncoding::kDeltaVarint) {
    return absl::InvalidArgumentError(
        Cat("indices: unknown index encoding ", static_cast<int>(encoding)));
  }
  size_t pos = 0;
  uint64_t next = 0;  // smallest index the next gap may produce
  for (uint64_t i = 0; i < k; ++i) {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (pos == in.size()) {
        return absl::InvalidArgumentError(Cat("indices: truncated varint for index ", i));
      }
      if (shift > 28) {
        return absl::InvalidArgumentError(Cat("indices: varint for index ", i, " is too long"));
      }
      const uint8_t byte = in[pos++];
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) break;
    }
    const uint64_t index = next + v;
    if (index >= n) {
      return absl::InvalidArgumentError(
          Cat("indices: index ", i, " decodes to ", index, ", past the ", n, " positions"));
    }
    out[i] = static_cast<uint32_t>(index);
    next = index + 1;
  }
  if (pos != in.size()) {
    return absl::InvalidArgumentError(
        Cat("indices: ", in.size() - pos, " trailing bytes after ", k, " varints"));
  }
  return absl::OkStatus();
}

}  // namespace longhaul::compression
