// Checked placement of fragment slices; see fragment_slices.h.
#include "daemon/job/state/fragment_slices.h"

#include <xxhash.h>

#include <cstring>

#include "compression/frame.h"

namespace longhaul::daemon {

Status PlaceSlice(const transport::WireTensor& t, FragmentArray* array, const std::string& from) {
  const uint64_t size = array->values.size(), offset = t.header.element_offset();
  auto refuse = [&](const std::string& why) {
    return absl::DataLossError("fragment from site '" + from + "': slice at value " +
                               std::to_string(offset) + " of an array of " + std::to_string(size) +
                               " values (" + std::to_string(array->filled) + " received): " + why);
  };
  if (offset != array->filled) return refuse("not the next slice");
  compression::FrameLimits limits;
  limits.max_elements = size - array->filled;
  StatusOr<compression::FrameHeader> header = compression::ParseFrameHeader(t.payload, limits);
  if (!header.ok()) return refuse(std::string(header.status().message()));
  const uint64_t count = header->element_count;
  if (count > size - array->filled) return refuse(std::to_string(count) + " values do not fit");
  Status s = compression::DecodeFrameValues(
      *header, t.payload, {array->values.data() + array->filled, static_cast<size_t>(count)});
  if (!s.ok()) return refuse(std::string(s.message()));
  array->filled += count;
  return absl::OkStatus();
}

Status CheckComplete(const FragmentArray& array, const std::string& from, const std::string& what) {
  if (array.filled == array.values.size()) return absl::OkStatus();
  return absl::DataLossError("fragment from site '" + from + "': " + what + " got " +
                             std::to_string(array.filled) + " values, expected " +
                             std::to_string(array.values.size()));
}

std::vector<uint8_t> SealLoaderState(std::string_view text) {
  std::vector<uint8_t> out(text.size() + 8);
  if (!text.empty()) std::memcpy(out.data(), text.data(), text.size());
  const uint64_t hash = XXH64(text.data(), text.size(), 0);
  for (int i = 0; i < 8; ++i) out[text.size() + i] = static_cast<uint8_t>(hash >> (8 * i));
  return out;
}

StatusOr<std::string> OpenLoaderState(std::span<const uint8_t> sealed, const std::string& from) {
  auto refuse = [&](const std::string& why) {
    return absl::DataLossError("fragment from site '" + from + "': loader state of " +
                               std::to_string(sealed.size()) + " bytes " + why);
  };
  if (sealed.size() < 8) return refuse("cannot hold its checksum");
  if (sealed.size() > kMaxLoaderStateBytes) {
    return refuse("(at most " + std::to_string(kMaxLoaderStateBytes) + ")");
  }
  const size_t n = sealed.size() - 8;
  uint64_t hash = 0;
  for (int i = 0; i < 8; ++i) hash |= static_cast<uint64_t>(sealed[n + i]) << (8 * i);
  if (hash != XXH64(sealed.data(), n, 0)) return refuse("fails its checksum");
  return std::string(reinterpret_cast<const char*>(sealed.data()), n);
}

}  // namespace longhaul::daemon
