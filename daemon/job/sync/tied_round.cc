// A tied-embedding holder's view of a gossip round, and what two views agree on
// (tied_round.h).
#include "daemon/job/sync/tied_round.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace longhaul::daemon {
namespace {

constexpr uint8_t kMagic[4] = {'L', 'H', 'T', 'V'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kCame = 1, kUnsent = 2;

void Put(std::vector<uint8_t>* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t Get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

std::vector<int> Both(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

}  // namespace

std::vector<uint8_t> EncodeTiedRoundView(const TiedRoundView& view, int replicas, int self) {
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  out.reserve(TiedRoundViewBytes(replicas));
  Put(&out, kVersion, 1);
  Put(&out, view.kind, 1);
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
                                            uint32_t kind, uint64_t step) {
  const std::string where = "tied-embedding view of " + std::to_string(bytes.size()) + " bytes (" +
                            (kind == kTiedViewFinal ? "final average" : "round") + " after step " +
                            std::to_string(step + 1) + "): ";
  const size_t size = TiedRoundViewBytes(replicas);
  if (bytes.size() != size) {
    return absl::InvalidArgumentError(where + "a view of " + std::to_string(replicas) +
                                      " replicas is " + std::to_string(size) + " bytes");
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, 4) != 0) return absl::InvalidArgumentError(where + "bad magic");
  if (XXH64(p, size - 8, 0) != Get(p + size - 8, 8)) {
    return absl::DataLossError(where + "checksum mismatch");
  }
  if (p[4] != kVersion) {
    return absl::InvalidArgumentError(where + "version " + std::to_string(p[4]) +
                                      ", this site reads " + std::to_string(kVersion));
  }
  TiedRoundView v;
  v.kind = p[5];
  v.step = Get(p + 8, 8);
  v.removed = Get(p + 16, 8);
  v.hash = Get(p + 24, 8);
  const uint64_t n = Get(p + 6, 2);
  if (v.kind != kind || v.step != step || n != static_cast<uint64_t>(replicas)) {
    return absl::InvalidArgumentError(
        where + "it names the " + (v.kind == kTiedViewFinal ? "final average" : "round") +
        " after step " + std::to_string(v.step + 1) + " of " + std::to_string(n) + " replicas");
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

TiedAgreement AgreeTiedRound(const TiedRoundView& a, const TiedRoundView& b) {
  TiedAgreement t;
  t.came = Both(a.came, b.came);
  t.unsent = Both(a.unsent, b.unsent);
  t.removed = std::max(a.removed, b.removed);
  t.split = a.hash != b.hash;
  return t;
}

uint64_t TiedHash(std::span<const float> values) {
  return XXH64(values.data(), values.size_bytes(), 0);
}

}  // namespace longhaul::daemon
