// FrameAssembler: chunked TensorFrames of one stream into whole, checked tensors.
#include "daemon/transport/frame_assembler.h"

#include <string>

namespace longhaul::daemon::transport {

Status FrameAssembler::Add(const v1::TensorFrame& frame) {
  ++frames_;
  bytes_ += frame.payload().size();
  if (frame.payload().size() > kMaxChunkBytes) {
    return absl::InvalidArgumentError("tensor frame: chunk of " +
                                      std::to_string(frame.payload().size()) + " bytes, at most " +
                                      std::to_string(kMaxChunkBytes));
  }
  if (!in_tensor_) {
    if (frame.chunk_index() != 0) {
      return absl::InvalidArgumentError("tensor frame out of sequence (chunk " +
                                        std::to_string(frame.chunk_index()) + ", expected 0)");
    }
    // At most 16 chunks plus one per KiB (the sender cuts at 1 MiB): a stream of empty chunks
    // cannot keep the receiver busy.
    if (frame.chunk_count() == 0 || frame.chunk_count() > frame.encoded_size() / 1024 + 16) {
      return absl::InvalidArgumentError("tensor frame: " + std::to_string(frame.chunk_count()) +
                                        " chunks for " + std::to_string(frame.encoded_size()) +
                                        " bytes");
    }
    RETURN_IF_ERROR(admit_(frame));
    first_ = frame;
    first_.clear_payload();
    payload_.clear();
    payload_.reserve(frame.encoded_size());  // admit bounded it by the job's shapes
    expected_chunk_ = 0;
    in_tensor_ = true;
  }
  if (frame.chunk_index() != expected_chunk_ || frame.job_id() != first_.job_id() ||
      frame.chunk_offset() != payload_.size() ||
      frame.payload().size() > first_.encoded_size() - payload_.size()) {
    return absl::InvalidArgumentError(
        "tensor frame out of sequence (chunk " + std::to_string(frame.chunk_index()) +
        " at offset " + std::to_string(frame.chunk_offset()) + ", expected chunk " +
        std::to_string(expected_chunk_) + " at " + std::to_string(payload_.size()) + " of " +
        std::to_string(first_.encoded_size()) + " bytes)");
  }
  payload_.insert(payload_.end(), frame.payload().begin(), frame.payload().end());
  ++expected_chunk_;
  if (expected_chunk_ != first_.chunk_count()) return absl::OkStatus();
  in_tensor_ = false;
  if (payload_.size() != first_.encoded_size()) {
    return absl::DataLossError("tensor frame size mismatch (job " + first_.job_id() + ", " +
                               std::to_string(payload_.size()) + " of " +
                               std::to_string(first_.encoded_size()) + " bytes)");
  }
  std::vector<uint8_t> payload = std::move(payload_);
  payload_ = {};
  return deliver_(first_, std::move(payload));
}

Status FrameAssembler::Finish() const {
  if (!in_tensor_) return absl::OkStatus();
  return absl::InvalidArgumentError("tensor stream ended inside a tensor (job " + first_.job_id() +
                                    ", " + std::to_string(expected_chunk_) + " of " +
                                    std::to_string(first_.chunk_count()) + " chunks)");
}

}  // namespace longhaul::daemon::transport
