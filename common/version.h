// Build and protocol versions, shown in status output and checked in the peer handshake.
#pragma once

#include <cstdint>

namespace longhaul {

// The release of this build.
inline constexpr const char* kBuildVersion = "0.1.0";

// Peers must speak the same protocol version; Hello rejects any other.
// 2: fragment transfers carry fp32 compression frames (TensorFrame.element_offset).
inline constexpr uint32_t kProtocolVersion = 2;

}  // namespace longhaul
