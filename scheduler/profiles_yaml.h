// The profiles file of `longhaul plan --profiles FILE`: what the planner would otherwise get
// from the daemons' calibration runs and link monitors, written by hand or by a script.
// Example (configs/profiles.example.yaml):
//
//   sites:
//     - name: alpha
//       flops: 250 TFLOP/s       # sustained on the job's layer shapes (or a plain number)
//       memory: 80 GiB           # optional: what one stage may allocate; default no limit
//       optimizer: 2e10          # optional: AdamW parameter updates per second
//       devices: 8               # optional: a stage here is sharded across 8 devices
//       device_memory: 80 GiB    #   what one holds (optional: default no limit)
//       device_link: 360 GB/s    #   their ring bus bandwidth (needed with devices > 1)
//       device_latency: 30 us    #   per collective (optional: default 0)
//   links:
//     - {from: alpha, to: beta, bandwidth: 10 Gbit/s, rtt: 30 ms}
//     - {from: beta, to: alpha, bandwidth: 4 Gbit/s, rtt: 30 ms, symmetric: false}
//   default_link: {bandwidth: 1 Gbit/s, rtt: 80 ms}   # optional: every pair not listed
//
// A link is symmetric unless it says `symmetric: false`: it also gives the reverse direction,
// unless that direction is listed itself. Units: FLOP/s, kFLOP/s .. PFLOP/s; bytes as B, KB,
// MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024); rates as bit/s,
// kbit/s, Mbit/s, Gbit/s, Tbit/s or B/s, KB/s, MB/s, GB/s; times as us, ms, s. A plain
// number is FLOP/s, bytes, bytes per second or seconds. Errors name FILE:LINE:COLUMN and the
// key.
#pragma once

#include <string>

#include "common/status.h"
#include "scheduler/profiles.h"

namespace longhaul::scheduler {

// Parses `text`; `source` names it in errors. The result passes ValidateProfiles.
StatusOr<Profiles> ParseProfiles(const std::string& text, const std::string& source);
// Reads and parses the file at `path`.
StatusOr<Profiles> LoadProfiles(const std::string& path);

// "10 Gbit/s" -> 1.25e9 bytes/s; "30ms" -> 0.03; "80 GiB" -> 85899345920; "250 TFLOP/s" ->
// 2.5e14. `kind` is "rate", "time", "bytes" or "flops". Errors say what was expected.
StatusOr<double> ParseQuantity(const std::string& text, const std::string& kind);

}  // namespace longhaul::scheduler
