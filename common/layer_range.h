// The one notation for a range of layers in anything people read (CLI tables, the status
// page, logs, errors, docs): half-open, "[begin,end)", so "[0,4)" is layers 0, 1, 2 and 3.
// JSON carries the two numbers (layer_begin, layer_end) with the same meaning.
#pragma once

#include <cstdint>
#include <string>

namespace longhaul {

inline std::string LayerRange(int64_t begin, int64_t end) {
  return "[" + std::to_string(begin) + "," + std::to_string(end) + ")";
}

}  // namespace longhaul
