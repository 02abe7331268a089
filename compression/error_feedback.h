// Error feedback for tensors sent repeatedly (weight gradients, tied-embedding gradients):
// whatever the codec drops or rounds away in one send is carried in a residual buffer and
// added to the next send, so nothing is lost for good, only delayed. With top-k this is what
// makes aggressive sparsification converge (Stich et al., "Sparsified SGD with memory").
//
// One ErrorFeedback per (link, tensor): it owns the residual of one tensor shape.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"

namespace longhaul::compression {

class ErrorFeedback {
 public:
  // REQUIRES: `codec` outlives this object.
  explicit ErrorFeedback(const Codec* codec) : codec_(codec) {}

  // Encodes values + residual as a frame (frame.h) into *frame, then sets the residual to
  // (values + residual) - decode(frame). The first call, and any call whose tensor size
  // differs from the last one, starts from a zero residual. On error the residual is kept.
  Status EncodeFrame(std::span<const float> values, std::span<const int64_t> shape,
                     const EncodeOptions& options, std::vector<uint8_t>* frame);
  // EncodeFrame of one part of a tensor of `total` values that is sent in parts (a ring
  // reduction's chunks, fleet/sync_ring.h): values + residual[offset, offset + values.size()),
  // and only that range of the residual changes. A residual of another size starts from zero.
  // REQUIRES: offset + values.size() <= total.
  Status EncodeFrameAt(std::span<const float> values, size_t offset, size_t total,
                       std::span<const int64_t> shape, const EncodeOptions& options,
                       std::vector<uint8_t>* frame);

  // Drops the carried error (after a checkpoint restore, or when the codec changes).
  void Reset() { residual_.clear(); }

  const std::vector<float>& residual() const { return residual_; }
  // A checkpointed residual (its size is the tensor's; an empty one is a zero residual).
  void SetResidual(std::vector<float> residual) { residual_ = std::move(residual); }

 private:
  const Codec* codec_;
  std::vector<float> residual_;
};

// A codec that owns its error feedback: one sender's encoder of one tensor it sends again and
// again (a replica's contribution to a sync slice, fleet/sync_reduce.h; one end's part of the
// tied-embedding gradient, model/tied_exchange.h). Those add how they are created and used.
class FeedbackEncoder {
 public:
  virtual ~FeedbackEncoder() = default;
  FeedbackEncoder(const FeedbackEncoder&) = delete;
  FeedbackEncoder& operator=(const FeedbackEncoder&) = delete;

  // Encodes `values` plus the carried residual as a frame of `shape` into *frame; the
  // residual becomes what the frame does not carry (always zero for a lossless codec).
  // `seed` varies stochastic rounding between sends (the step, say).
  Status Encode(std::span<const float> values, std::span<const int64_t> shape, uint64_t seed,
                std::vector<uint8_t>* frame);
  // Encode of the part at `offset` of a tensor of `total` values (ErrorFeedback::EncodeFrameAt),
  // as a frame of shape {values.size()}.
  Status EncodePart(std::span<const float> values, size_t offset, size_t total, uint64_t seed,
                    std::vector<uint8_t>* frame);

  const CodecSpec& spec() const { return codec_->spec(); }
  const std::vector<float>& residual() const { return feedback_.residual(); }
  // A checkpointed residual of a tensor of `n` values (empty: none carried); DataLoss when
  // its size is another.
  Status RestoreResidual(std::vector<float> residual, size_t n);

 protected:
  explicit FeedbackEncoder(std::unique_ptr<Codec> codec)
      : codec_(std::move(codec)), feedback_(codec_.get()) {}

 private:
  std::unique_ptr<Codec> codec_;
  ErrorFeedback feedback_;
};

}  // namespace longhaul::compression
