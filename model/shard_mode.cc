// ShardModeName; see shard_mode.h.
#include "model/shard_mode.h"

#include <map>

#include "absl/strings/str_cat.h"

namespace longhaul::model {

const char* ShardModeName(ShardMode mode) {
  switch (mode) {
    case ShardMode::kReplicate:
      return "replicate";
    case ShardMode::kZero1:
      return "zero1";
    case ShardMode::kZero2:
      return "zero2";
    case ShardMode::kZero3:
      return "zero3";
  }
  return "?";
}

std::string ModesSummary(const std::vector<ShardMode>& modes) {
  std::vector<ShardMode> order;
  std::map<ShardMode, int> count;
  for (ShardMode m : modes) {
    if (count[m]++ == 0) order.push_back(m);
  }
  std::string out;
  for (ShardMode m : order) {
    absl::StrAppend(&out, out.empty() ? "" : ", ", ShardModeName(m), " x ", count[m]);
  }
  return out;
}

}  // namespace longhaul::model
