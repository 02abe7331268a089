// Bounds-checked placement of fragment chunks; see fragment_chunks.h.
#include "daemon/job/fragment_chunks.h"

#include <cstring>

namespace longhaul::daemon {

Status PlaceChunk(const v1::TensorFrame& f, FragmentArray* array, const std::string& from) {
  const uint64_t capacity = array->values.size() * sizeof(float);
  const uint64_t off = f.chunk_offset(), n = f.payload().size();
  if (off % sizeof(float) != 0 || n % sizeof(float) != 0 || off > capacity || n > capacity - off ||
      n > capacity - array->bytes_received) {
    return absl::DataLossError("fragment from site '" + from + "': chunk of " + std::to_string(n) +
                               " bytes at offset " + std::to_string(off) +
                               " does not fit an array of " + std::to_string(capacity) +
                               " bytes (" + std::to_string(array->bytes_received) + " received)");
  }
  if (n > 0)
    std::memcpy(reinterpret_cast<char*>(array->values.data()) + off, f.payload().data(), n);
  array->bytes_received += n;
  return absl::OkStatus();
}

Status CheckComplete(const FragmentArray& array, const std::string& from, const std::string& what) {
  const uint64_t expected = array.values.size() * sizeof(float);
  if (array.bytes_received == expected) return absl::OkStatus();
  return absl::DataLossError("fragment from site '" + from + "': " + what + " got " +
                             std::to_string(array.bytes_received) + " bytes, expected " +
                             std::to_string(expected));
}

}  // namespace longhaul::daemon
