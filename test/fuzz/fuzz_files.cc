// Fuzz target: the readers of files a daemon loads: stage checkpoints
// (daemon/job/state/stage_checkpoint.h), llm.c model checkpoints (model/checkpoint.h) and llm.c
// token files (model/token_data.h). The first byte picks the reader; the rest is the file.
// Invariants: no crash, no allocation the file's own size does not justify (ASan's
// allocator limit catches one), and what loads is self-consistent.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "daemon/job/state/stage_checkpoint.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/token_data.h"

namespace {

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name + "." + std::to_string(::getpid());
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::string path = TempPath("fuzz_file.bin");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data) + 1, static_cast<std::streamsize>(size - 1));
  }
  switch (data[0] % 3) {
    case 0: {
      auto s = longhaul::daemon::ReadStageState(*longhaul::FileEnv::Default(), path, 1, 3);
      if (s.ok() && (s->m.size() != s->params.size() || s->v.size() != s->params.size()))
        std::abort();
      break;
    }
    case 1: {
      auto c = longhaul::model::ReadCheckpoint(path);
      if (c.ok() && !longhaul::model::ValidateConfig(c->config).ok()) std::abort();
      break;
    }
    default: {
      auto t = longhaul::model::ReadTokenData(path, longhaul::model::DataFormat::kLlmc);
      if (t.ok() && t->max_token > INT32_MAX) std::abort();  // ids the model's int32 holds
    }
  }
  return 0;
}

extern "C" void LonghaulFuzzSeeds(std::vector<std::string>* seeds) {
  const std::string path = TempPath("fuzz_seed.bin");
  longhaul::daemon::StageState s;
  s.step = 4;
  s.layer_begin = 1;
  s.layer_end = 3;
  s.params.assign(40, 0.5f);
  s.m.assign(40, 0.25f);
  s.v.assign(40, 1.0f);
  s.loader_state = "pos";
  if (longhaul::daemon::WriteStageState(*longhaul::FileEnv::Default(), path, s).ok())
    seeds->push_back('\0' + ReadAll(path));
  const auto config = longhaul::model::MakeConfig(1, 8, 2, 16, 8);
  std::vector<float> params(static_cast<size_t>(longhaul::model::NumParameters(config)), 0.1f);
  if (longhaul::model::WriteCheckpoint(path, config, params.data()).ok())
    seeds->push_back('\1' + ReadAll(path));
  if (longhaul::model::WriteTokenFile(path, {1, 2, 3, 4, 5, 6, 7, 8}).ok())
    seeds->push_back('\2' + ReadAll(path));
  if (longhaul::model::WriteTokenFile(path, {1, 70000, 3, 128255}).ok())  // uint32 ids
    seeds->push_back('\2' + ReadAll(path));
  ::unlink(path.c_str());
}
