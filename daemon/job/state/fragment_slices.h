// Fragment transfers (layer moves, export) arrive from another site's FetchFragment as whole
// tensors: each one slice of a float array (parameters or an AdamW moment), an fp32
// compression frame whose element_offset says where it starts. PlaceSlice decodes one into
// its array after checking that it is the next slice (it starts where the previous one
// ended) and fits, overflow-safe; CheckComplete then checks that the array was filled. So
// every value is written exactly once, and nothing is written outside the array.
// The first stage's data loader state travels beside them as text sealed with its own
// checksum (SealLoaderState), as a frame's checksum covers a tensor: the transport adds none.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "daemon/transport/link.h"

namespace longhaul::daemon {

struct FragmentArray {
  std::vector<float> values;  // sized by the receiver from its own layout
  uint64_t filled = 0;        // values received, from the start
};

// Decodes `t` into `array` at its element_offset. DataLoss naming `from` when the slice is
// not the next one, runs past the array, or is not a valid frame.
Status PlaceSlice(const transport::WireTensor& t, FragmentArray* array, const std::string& from);

// DataLoss naming `from` and `what` unless `array` was filled.
Status CheckComplete(const FragmentArray& array, const std::string& from, const std::string& what);

// A loader state's text as it travels: the text, then the XXH64 (seed 0) of the text,
// little-endian.
inline constexpr size_t kMaxLoaderStateBytes = 64 << 10;
std::vector<uint8_t> SealLoaderState(std::string_view text);
// The text of a sealed loader state. DataLoss naming `from` when it is longer than
// kMaxLoaderStateBytes, too short to hold a checksum, or its checksum does not match.
StatusOr<std::string> OpenLoaderState(std::span<const uint8_t> sealed, const std::string& from);

}  // namespace longhaul::daemon
