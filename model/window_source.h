// WindowSource: where a DataLoader's (T+1)-token windows come from. A source defines one
// sequence of windows, epoch after epoch (shuffled or in order), addressed by position, so
// that a loader's whole state stays one counter. Implementations: a token stream in memory
// (data_loader.h: llm.c token files, text, the built-in corpus), the shards of a token
// manifest streamed one at a time, and a weighted mixture of manifests (manifest_windows.h).
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace longhaul::model {

class WindowSource {
 public:
  virtual ~WindowSource() = default;

  // Windows in one epoch (> 0).
  virtual int64_t num_windows() const = 0;
  // Writes the seq_len + 1 tokens of the window at `position` of the sequence to `out`.
  // Errors: a shard that cannot be read or is not what its manifest says.
  virtual Status Window(int64_t position, int32_t* out) = 0;
  // What the data is, for messages.
  virtual const std::string& name() const = 0;
  // Identifies the data beyond its window count ("" for none): a loader's saved state
  // carries it and a restore onto other data is refused.
  virtual std::string fingerprint() const { return ""; }

  // Parts of the sequence counted separately (a mixture's sources), in order.
  virtual int num_parts() const { return 1; }
  virtual std::string part_name(int part) const { return name(); }
  // Windows of `part` among positions [0, end).
  virtual int64_t PartWindows(int part, int64_t end) const { return part == 0 ? end : 0; }
};

}  // namespace longhaul::model
