// linkem schedule files: how an emulated link changes over time.
//
//   # TIME(seconds from start)  KEY=VALUE ... | drop
//   0    rate=200mbit delay=20ms jitter=2ms
//   60   rate=20mbit              # both directions fall to 20 Mbit/s after a minute
//   90   up_rate=5mbit down_delay=40ms
//   120  drop                     # cut every open connection (peers must reconnect)
//
// Keys: rate, delay, jitter (both directions) and up_/down_ forms of each ("up" is the
// direction from the connecting side to the target). Unset keys keep their values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "tools/linkem/shaper.h"

namespace longhaul::linkem {

struct LinkChange {
  double at_seconds = 0;
  std::optional<double> up_rate, down_rate, up_delay, down_delay, up_jitter, down_jitter;
  bool drop = false;

  // Applies the set fields to `up` and `down`.
  void ApplyTo(LinkParams* up, LinkParams* down) const;
};

// Parses one change's "KEY=VALUE ..." words (the time excluded) or "drop".
StatusOr<LinkChange> ParseChange(const std::vector<std::string>& words);

// Parses a whole schedule; errors name `source`:line. Entries come out sorted by time.
StatusOr<std::vector<LinkChange>> ParseSchedule(const std::string& text, const std::string& source);
StatusOr<std::vector<LinkChange>> LoadSchedule(const std::string& path);

}  // namespace longhaul::linkem
