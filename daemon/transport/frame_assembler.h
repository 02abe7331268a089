// One SendFrames or FetchFragment stream, reassembled: a tensor arrives as chunked TensorFrames
// (chunk 0 carries its metadata: job, attempt, step, kind, encoded size; its payload begins
// with the compression frame's header, which names shape, codec and sizes). The assembler
// admits a tensor on its first chunk before buffering a byte (the caller checks who sends
// it, whether the job expects it and the frame header in that chunk), then takes chunks only
// in sequence and at the right offsets, never past the announced size, and hands the tensor
// on only when it is whole. The payload's integrity is the frame's own checksum, which the
// receiver checks on the whole tensor (JobHost::Deliver, fragment_slices.h): the transport
// adds none of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "common/status.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon::transport {

class FrameAssembler {
 public:
  // A chunk's payload may be at most this many bytes (the sender cuts at 1 MiB).
  static constexpr uint64_t kMaxChunkBytes = 8 << 20;

  // `admit` sees each tensor's first chunk (payload included) before anything is buffered;
  // its error ends the stream. `deliver` gets each whole, checked tensor: its first chunk
  // without payload, and the payload.
  using Admit = std::function<Status(const v1::TensorFrame& first)>;
  using Deliver = std::function<Status(const v1::TensorFrame& first, std::vector<uint8_t> payload)>;
  FrameAssembler(Admit admit, Deliver deliver)
      : admit_(std::move(admit)), deliver_(std::move(deliver)) {}

  // One chunk. InvalidArgument for a chunk out of sequence, at the wrong offset, past the
  // announced size or too large; DataLoss when a whole tensor's size is wrong;
  // otherwise what admit or deliver returned.
  Status Add(const v1::TensorFrame& frame);

  // At the end of the stream: InvalidArgument when it ended inside a tensor.
  Status Finish() const;

  uint64_t frames() const { return frames_; }
  uint64_t bytes() const { return bytes_; }

 private:
  Admit admit_;
  Deliver deliver_;
  v1::TensorFrame first_;
  std::vector<uint8_t> payload_;
  uint32_t expected_chunk_ = 0;
  bool in_tensor_ = false;
  uint64_t frames_ = 0, bytes_ = 0;
};

}  // namespace longhaul::daemon::transport
