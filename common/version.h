// Build and protocol versions, shown in status output and checked in the peer handshake.
#pragma once

#include <cstdint>

namespace longhaul {

// The release of this build.
inline constexpr const char* kBuildVersion = "0.1.0";

// Peers must speak the same protocol version; Hello rejects any other.
// 2: fragment transfers carry fp32 compression frames (TensorFrame.element_offset).
// 3: a tensor's shape, codec, sizes and checksum live in its compression frame only
//    (TensorFrame fields 6, 7, 8 and 14 are gone); a loader state carries its own checksum.
inline constexpr uint32_t kProtocolVersion = 3;

}  // namespace longhaul
