// The one Codec implementation: a pipeline of an optional top-k sparsifier, a dense value
// codec and an optional zstd stage, assembled from a CodecSpec (see codec.h).
#include "compression/codec.h"

#include <cmath>

#include "compression/dense_codec.h"
#include "compression/index_coding.h"
#include "compression/sparse_codec.h"
#include "compression/strings.h"
#include "compression/zstd_stage.h"

namespace longhaul::compression {
namespace {

class PipelineCodec : public Codec {
 public:
  explicit PipelineCodec(const CodecSpec& spec) : spec_(spec) {}

  const CodecSpec& spec() const override { return spec_; }

  Status Encode(std::span<const float> values, const EncodeOptions& options,
                std::vector<uint8_t>* out) const override {
    const size_t start = out->size();
    Status status = EncodeImpl(values, options, out);
    if (!status.ok()) out->resize(start);
    return status;
  }

  Status Decode(std::span<const uint8_t> encoded, std::span<float> out) const override {
    if (encoded.size() > MaxEncodedSize(out.size())) {
      return absl::InvalidArgumentError(Cat(spec_.ToString(), ": ", encoded.size(),
                                            " encoded bytes exceed the most ", out.size(),
                                            " values can take (", MaxEncodedSize(out.size()), ")"));
    }
    std::span<const uint8_t> inner = encoded;
    std::vector<uint8_t> decompressed;
    if (spec_.zstd.enabled) {
      RETURN_IF_ERROR(ZstdDecompress(encoded, InnerMaxSize(out.size()), &decompressed));
      inner = decompressed;
    }
    if (spec_.topk.enabled) return DecodeSparse(spec_, inner, out);
    return DecodeDense(spec_.value, inner, out);
  }

  uint64_t MaxEncodedSize(uint64_t n) const override {
    const uint64_t inner = InnerMaxSize(n);
    return spec_.zstd.enabled ? ZstdMaxSize(inner) : inner;
  }

 private:
  uint64_t InnerMaxSize(uint64_t n) const {
    return spec_.topk.enabled ? MaxSparseSize(spec_, n) : DenseEncodedSize(spec_.value, n);
  }

  Status EncodeImpl(std::span<const float> values, const EncodeOptions& options,
                    std::vector<uint8_t>* out) const {
    if (!spec_.zstd.enabled) return EncodeInner(values, options, out);
    std::vector<uint8_t> inner;
    RETURN_IF_ERROR(EncodeInner(values, options, &inner));
    return ZstdCompress(inner, spec_.zstd.level, out);
  }

  Status EncodeInner(std::span<const float> values, const EncodeOptions& options,
                     std::vector<uint8_t>* out) const {
    if (spec_.topk.enabled) return EncodeSparse(spec_, values, options.seed, out);
    const size_t start = out->size();
    out->resize(start + DenseEncodedSize(spec_.value, values.size()));
    return EncodeDense(spec_.value, values, options.seed, out->data() + start);
  }

  const CodecSpec spec_;
};

}  // namespace

StatusOr<std::unique_ptr<Codec>> MakeCodec(const CodecSpec& spec) {
  RETURN_IF_ERROR(spec.Validate());
  return std::unique_ptr<Codec>(new PipelineCodec(spec));
}

StatusOr<std::unique_ptr<Codec>> MakeCodec(std::string_view spec) {
  ASSIGN_OR_RETURN(CodecSpec parsed, ParseCodecSpec(spec));
  return MakeCodec(parsed);
}

uint64_t EstimateEncodedSize(const CodecSpec& spec, uint64_t n) {
  if (!spec.topk.enabled) return DenseEncodedSize(spec.value, n);
  const uint64_t k = TopKCount(spec.topk, n);
  // Randomly spread indices: gaps are about geometric with mean n / k, and a gap of at least
  // 2^(7j) takes more than j varint bytes.
  const double p = n == 0 ? 1.0 : static_cast<double>(k) / static_cast<double>(n);
  double bytes_per_index = 1;
  for (int j = 1; j <= 4; ++j) bytes_per_index += std::exp(-std::ldexp(p, 7 * j));
  const uint64_t index_bytes =
      std::min(BitmapSize(n), static_cast<uint64_t>(std::ceil(k * bytes_per_index)));
  return 17 + index_bytes + DenseEncodedSize(spec.value, k);
}

}  // namespace longhaul::compression
