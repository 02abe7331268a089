// Fragment transfers (layer moves, export) arrive as chunks of float arrays in TensorFrames
// from another site's FetchFragment. PlaceChunk copies one chunk into its array after
// checking, overflow-safe, that the offset and size are whole floats inside it; every
// caller then checks that each array was filled exactly once (FragmentArrays::Complete).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

struct FragmentArray {
  std::vector<float> values;  // sized by the receiver from its own layout
  uint64_t bytes_received = 0;
};

// Copies `f`'s payload into `array` at f.chunk_offset(). DataLoss naming `from` when the
// chunk is misaligned, runs past the array, or would overfill it.
Status PlaceChunk(const v1::TensorFrame& f, FragmentArray* array, const std::string& from);

// DataLoss naming `from` and `what` unless `array` received exactly its size in bytes.
Status CheckComplete(const FragmentArray& array, const std::string& from, const std::string& what);

}  // namespace longhaul::daemon
