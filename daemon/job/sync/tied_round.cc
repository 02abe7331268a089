// The tied embedding's holders' views of a gossip round, the frames the first stage took, and
// what the two views agree on (tied_round.h).
#include "daemon/job/sync/tied_round.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace longhaul::daemon {
namespace {

constexpr uint8_t kViewMagic[4] = {'L', 'H', 'T', 'V'};
constexpr uint8_t kFramesMagic[4] = {'L', 'H', 'T', 'F'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kCame = 1, kUnsent = 2;
constexpr size_t kFramesHeader = 16, kFrameEntry = 12, kChecksum = 8;

void Put(std::vector<uint8_t>* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t Get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// The header and checksum checks both formats share: magic, checksum, version, zero byte.
Status CheckSealed(std::span<const uint8_t> bytes, const uint8_t* magic, size_t least,
                   const std::string& where) {
  if (bytes.size() < least) {
    return absl::InvalidArgumentError(where + "shorter than its header and checksum (" +
                                      std::to_string(least) + " bytes)");
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, magic, 4) != 0) return absl::InvalidArgumentError(where + "bad magic");
  if (XXH64(p, bytes.size() - kChecksum, 0) != Get(p + bytes.size() - kChecksum, 8)) {
    return absl::DataLossError(where + "checksum mismatch");
  }
  if (p[4] != kVersion || p[5] != 0) {
    return absl::InvalidArgumentError(where + "version " + std::to_string(p[4]) + "." +
                                      std::to_string(p[5]) + ", this site reads " +
                                      std::to_string(kVersion) + ".0");
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<uint8_t> EncodeTiedRoundView(const TiedRoundView& view, int replicas, int self) {
  std::vector<uint8_t> out(kViewMagic, kViewMagic + 4);
  out.reserve(TiedRoundViewBytes(replicas));
  Put(&out, kVersion, 1);
  Put(&out, 0, 1);
  Put(&out, static_cast<uint64_t>(replicas), 2);
  Put(&out, view.step, 8);
  Put(&out, view.removed, 8);
  Put(&out, view.hash, 8);
  std::vector<uint8_t> flags(static_cast<size_t>(replicas), 0);
  for (int r : view.came) flags[static_cast<size_t>(r)] |= kCame;
  for (int r : view.unsent) flags[static_cast<size_t>(r)] |= kUnsent;
  flags[static_cast<size_t>(self)] = 0;
  out.insert(out.end(), flags.begin(), flags.end());
  Put(&out, XXH64(out.data(), out.size(), 0), 8);
  return out;
}

StatusOr<TiedRoundView> DecodeTiedRoundView(std::span<const uint8_t> bytes, int replicas, int self,
                                            uint64_t step) {
  const std::string where = "tied-embedding view of " + std::to_string(bytes.size()) +
                            " bytes (the sync after step " + std::to_string(step + 1) + "): ";
  const size_t size = TiedRoundViewBytes(replicas);
  if (bytes.size() != size) {
    return absl::InvalidArgumentError(where + "a view of " + std::to_string(replicas) +
                                      " replicas is " + std::to_string(size) + " bytes");
  }
  RETURN_IF_ERROR(CheckSealed(bytes, kViewMagic, size, where));
  const uint8_t* p = bytes.data();
  TiedRoundView v;
  v.step = Get(p + 8, 8);
  v.removed = Get(p + 16, 8);
  v.hash = Get(p + 24, 8);
  const uint64_t n = Get(p + 6, 2);
  if (v.step != step || n != static_cast<uint64_t>(replicas)) {
    return absl::InvalidArgumentError(where + "it names the sync after step " +
                                      std::to_string(v.step + 1) + " of " + std::to_string(n) +
                                      " replicas");
  }
  if (v.removed > static_cast<uint64_t>(replicas)) {
    return absl::InvalidArgumentError(where + std::to_string(v.removed) + " replicas removed of " +
                                      std::to_string(replicas));
  }
  for (int r = 0; r < replicas; ++r) {
    const uint8_t f = p[32 + r];
    if ((f & ~(kCame | kUnsent)) != 0 || (r == self && f != 0)) {
      return absl::InvalidArgumentError(where + "replica " + std::to_string(r) + "'s flags " +
                                        std::to_string(f) + " (bits 0 and 1 of another's only)");
    }
    if (f & kCame) v.came.push_back(r);
    if (f & kUnsent) v.unsent.push_back(r);
  }
  return v;
}

TiedAgreement AgreeTiedRound(const TiedRoundView& first, const TiedRoundView& last) {
  TiedAgreement t;
  t.came = first.came;
  t.unsent = first.unsent;
  t.removed = std::max(first.removed, last.removed);
  t.split = first.hash != last.hash;
  return t;
}

uint64_t TiedHash(std::span<const float> values) {
  return XXH64(values.data(), values.size_bytes(), 0);
}

uint64_t TiedFramesMaxBytes(int replicas, uint64_t frame_bytes) {
  const uint64_t others = replicas > 1 ? static_cast<uint64_t>(replicas - 1) : 0;
  return kFramesHeader + others * (kFrameEntry + frame_bytes) + kChecksum;
}

std::vector<uint8_t> EncodeTiedFrames(uint64_t step, std::span<const TiedFrame> frames) {
  std::vector<uint8_t> out(kFramesMagic, kFramesMagic + 4);
  Put(&out, kVersion, 1);
  Put(&out, 0, 1);
  Put(&out, frames.size(), 2);
  Put(&out, step, 8);
  for (const auto& [replica, bytes] : frames) {
    Put(&out, static_cast<uint64_t>(replica), 4);
    Put(&out, bytes.size(), 8);
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  Put(&out, XXH64(out.data(), out.size(), 0), 8);
  return out;
}

StatusOr<std::vector<TiedFrame>> DecodeTiedFrames(std::span<const uint8_t> bytes, int replicas,
                                                  int self, uint64_t step, uint64_t frame_bytes) {
  const std::string where = "the tied embedding's frames of " + std::to_string(bytes.size()) +
                            " bytes (the sync after step " + std::to_string(step + 1) + "): ";
  if (bytes.size() > TiedFramesMaxBytes(replicas, frame_bytes)) {
    return absl::InvalidArgumentError(where + "more than " + std::to_string(replicas - 1) +
                                      " frames of at most " + std::to_string(frame_bytes) +
                                      " bytes take");
  }
  RETURN_IF_ERROR(CheckSealed(bytes, kFramesMagic, kFramesHeader + kChecksum, where));
  const uint8_t* p = bytes.data();
  const uint64_t count = Get(p + 6, 2), named = Get(p + 8, 8);
  if (named != step || count >= static_cast<uint64_t>(std::max(replicas, 1))) {
    return absl::InvalidArgumentError(
        where + std::to_string(count) + " frames of the sync after step " +
        std::to_string(named + 1) + " (" + std::to_string(replicas) + " replicas)");
  }
  std::vector<TiedFrame> frames;
  size_t at = kFramesHeader;
  const size_t end = bytes.size() - kChecksum;
  for (uint64_t i = 0; i < count; ++i) {
    if (end - at < kFrameEntry)
      return absl::InvalidArgumentError(where + "frame " + std::to_string(i) + " cut short");
    const uint64_t replica = Get(p + at, 4), size = Get(p + at + 4, 8);
    at += kFrameEntry;
    const int previous = frames.empty() ? -1 : frames.back().first;
    if (replica >= static_cast<uint64_t>(replicas) || static_cast<int>(replica) == self ||
        static_cast<int>(replica) <= previous) {
      return absl::InvalidArgumentError(where + "frame " + std::to_string(i) + " from replica " +
                                        std::to_string(replica) +
                                        " (another replica's, in ascending order)");
    }
    if (size > frame_bytes || size > end - at) {
      return absl::InvalidArgumentError(where + "frame " + std::to_string(i) + " of " +
                                        std::to_string(size) + " bytes (at most " +
                                        std::to_string(frame_bytes) + ", " +
                                        std::to_string(end - at) + " left)");
    }
    frames.emplace_back(static_cast<int>(replica),
                        std::vector<uint8_t>(p + at, p + at + static_cast<size_t>(size)));
    at += static_cast<size_t>(size);
  }
  if (at != end) {
    return absl::InvalidArgumentError(where + std::to_string(end - at) + " bytes after its frames");
  }
  return frames;
}

}  // namespace longhaul::daemon
