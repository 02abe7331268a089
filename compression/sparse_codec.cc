// Top-k sparse payloads (see sparse_codec.h).
#include "compression/sparse_codec.h"

#include <algorithm>

#include "compression/byte_io.h"
#include "compression/dense_codec.h"
#include "compression/index_coding.h"
#include "compression/strings.h"
#include "compression/topk.h"

namespace longhaul::compression {
namespace {
constexpr uint64_t kSparseHeaderSize = 8 + 1 + 8;
}  // namespace

uint64_t MaxSparseSize(const CodecSpec& spec, uint64_t n) {
  return kSparseHeaderSize + BitmapSize(n) + DenseEncodedSize(spec.value, n);
}

Status EncodeSparse(const CodecSpec& spec, std::span<const float> x, uint64_t seed,
                    std::vector<uint8_t>* out) {
  const uint64_t n = x.size();
  if (n > UINT32_MAX) {
    return absl::InvalidArgumentError(Cat("topk: ", n, " values; at most 2^32 - 1"));
  }
  const uint64_t k = TopKCount(spec.topk, n);
  std::vector<uint32_t> indices;
  RETURN_IF_ERROR(spec.topk.approximate ? TopKApprox(x, k, &indices) : TopKExact(x, k, &indices));
  std::vector<float> values(indices.size());
  for (size_t i = 0; i < indices.size(); ++i) values[i] = x[indices[i]];
  const IndexEncoding encoding = ChooseIndexEncoding(indices, n);
  const uint64_t index_bytes = EncodedIndexSize(encoding, indices, n);
  ByteWriter w(out);
  w.U64(indices.size());
  w.U8(static_cast<uint8_t>(encoding));
  w.U64(index_bytes);
  EncodeIndices(encoding, indices, n, w.Grow(index_bytes));
  const uint64_t value_bytes = DenseEncodedSize(spec.value, values.size());
  return EncodeDense(spec.value, values, seed, w.Grow(value_bytes));
}

Status DecodeSparse(const CodecSpec& spec, std::span<const uint8_t> in, std::span<float> out) {
  const uint64_t n = out.size();
  if (n > UINT32_MAX) {
    return absl::InvalidArgumentError(Cat("topk: ", n, " values; at most 2^32 - 1"));
  }
  ByteReader r(in, "topk payload");
  uint64_t k = 0, index_bytes = 0;
  uint8_t encoding = 0;
  RETURN_IF_ERROR(r.U64("k", &k));
  RETURN_IF_ERROR(r.U8("index encoding", &encoding));
  RETURN_IF_ERROR(r.U64("index size", &index_bytes));
  if (k > n) {
    return absl::InvalidArgumentError(Cat("topk payload: k = ", k, " exceeds the ", n, " values"));
  }
  if (encoding > static_cast<uint8_t>(IndexEncoding::kBitmap)) {
    return absl::InvalidArgumentError(Cat("topk payload: unknown index encoding ", encoding));
  }
  std::span<const uint8_t> index_span, value_span;
  RETURN_IF_ERROR(r.Bytes("indices", index_bytes, &index_span));
  RETURN_IF_ERROR(r.Bytes("values", DenseEncodedSize(spec.value, k), &value_span));
  RETURN_IF_ERROR(r.ExpectEnd());
  std::vector<uint32_t> indices(k);
  RETURN_IF_ERROR(DecodeIndices(static_cast<IndexEncoding>(encoding), index_span, n, indices));
  std::vector<float> values(k);
  RETURN_IF_ERROR(Annotate(DecodeDense(spec.value, value_span, values), "topk values"));
  std::fill(out.begin(), out.end(), 0.0f);
  for (uint64_t i = 0; i < k; ++i) out[indices[i]] = values[i];
  return absl::OkStatus();
}

}  // namespace longhaul::compression
