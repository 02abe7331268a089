// ShardModeName; see shard_mode.h.
#include "model/shard_mode.h"

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

}  // namespace longhaul::model
