// RuntimeEnv: what a daemon hands down, in one piece, to every job object it builds (the job
// host, its coordinators and stages, their senders and exchanges): the disk and clock they
// use, and where a stage gets its device codecs. Production takes the defaults; a test
// replaces one part. A new seam of this kind is a field here, not a field in each options
// struct between the daemon and the stage (DaemonOptions, JobHostOptions, StageRunnerContext
// each hold one RuntimeEnv).
#pragma once

#include "common/file_env.h"
#include "compression/device_encoder.h"

namespace longhaul::daemon {

struct RuntimeEnv {
  // Job records, stage checkpoints and sync states are written and read through it, and the
  // runtime's times are its clocks. REQUIRES: not null.
  FileEnv* files = FileEnv::Default();
  // A single-replica stage's device encoder and decoder (compression/device_encoder.h): the
  // backend's own (none on the CPU); compression::HostStandInDeviceCodecs in tests, so that CPU
  // stages take a GPU stage's paths (decoding into the fragment's input buffer, sends left
  // pending while the next pass computes) with the host codec's bytes.
  compression::DeviceCodecSource device_codecs = compression::BackendDeviceCodecs;
};

}  // namespace longhaul::daemon
