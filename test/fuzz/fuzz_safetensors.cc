// Fuzz target: the Hugging Face checkpoint readers (model/safetensors.h). Every input is
// written to a file and opened both as a safetensors file and as a
// model.safetensors.index.json. Invariants: no crash, no allocation beyond what the file's
// size justifies, and what opens is self-consistent: every tensor's bytes lie inside the file
// and match its shape, every float tensor reads (and no other one does), the float tensors and
// metadata written back as F32 read back bit for bit, and an index names only plain shard
// files.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "model/safetensors.h"

namespace {

namespace m = longhaul::model;

std::string TempPath(const char* name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name + "." + std::to_string(::getpid());
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckFile(const m::SafetensorsFile& file, size_t size, const std::string& copy_path) {
  std::vector<m::StTensor> floats;
  std::vector<std::vector<float>> values;
  values.reserve(file.names().size());
  for (size_t i = 0; i < file.names().size(); ++i) {
    const std::string& name = file.names()[i];
    Check(i == 0 || file.names()[i - 1] < name);
    const m::StTensorInfo* info = file.Find(name);
    Check(info != nullptr && file.Has(name));
    Check(info->file_offset >= 8 && info->num_bytes >= 0 &&
          uint64_t(info->file_offset) + uint64_t(info->num_bytes) <= size);
    int64_t n = 1;
    for (int64_t d : info->shape) n *= d;  // validated: no overflow
    Check(n == info->num_elements);
    std::vector<float> out(size_t(info->num_elements) + 1);
    const bool ok = file.ReadFloats(name, out.data(), size_t(info->num_elements)).ok();
    Check(ok == info->float_dtype.has_value());
    if (!ok) continue;
    Check(info->num_bytes == info->num_elements * (*info->float_dtype == m::StDtype::kF32 ? 4 : 2));
    Check(!file.ReadFloats(name, out.data(), out.size()).ok());
    out.pop_back();
    values.push_back(std::move(out));
    floats.push_back({name, m::StDtype::kF32, info->shape, values.back().data()});
  }
  Check(m::WriteSafetensors(copy_path, floats, file.metadata()).ok());
  auto copy = m::SafetensorsFile::Open(copy_path);
  Check(copy.ok() && (*copy)->names().size() == floats.size() &&
        (*copy)->metadata() == file.metadata());
  for (size_t i = 0; i < floats.size(); ++i) {
    std::vector<float> back(values[i].size());
    Check((*copy)->ReadFloats(floats[i].name, back.data(), back.size()).ok());
    Check(back.empty() || std::memcmp(back.data(), values[i].data(), back.size() * 4) == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = TempPath("fuzz_safetensors.bin");
  static const std::string copy_path = TempPath("fuzz_safetensors_copy.bin");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  if (auto file = m::SafetensorsFile::Open(path); file.ok()) {
    CheckFile(**file, size, copy_path);
  }
  if (auto index = m::ReadSafetensorsIndex(path); index.ok()) {
    for (const auto& [tensor, shard] : *index) {
      Check(!tensor.empty() && !shard.empty() && shard.find('/') == std::string::npos &&
            shard.find("..") == std::string::npos);
    }
  }
  return 0;
}

extern "C" void LonghaulFuzzSeeds(std::vector<std::string>* seeds) {
  const std::string path = TempPath("fuzz_safetensors_seed.bin");
  const std::vector<float> v = {1.0f, -2.5f, 0.1f, 65504.0f, 1e-7f, -0.0f};
  const std::vector<m::StTensor> tensors = {{"w.f32", m::StDtype::kF32, {2, 3}, v.data()},
                                            {"w.bf16", m::StDtype::kBF16, {3, 2}, v.data()},
                                            {"w.f16", m::StDtype::kF16, {6}, v.data()},
                                            {"scalar", m::StDtype::kF32, {}, v.data()},
                                            {"empty", m::StDtype::kF16, {0, 4}, nullptr}};
  if (m::WriteSafetensors(path, tensors, {{"format", "pt"}}).ok()) seeds->push_back(ReadAll(path));
  if (m::WriteSafetensorsIndex(path, 40,
                               {{"w.f32", "model-00001-of-00002.safetensors"},
                                {"w.bf16", "model-00002-of-00002.safetensors"}})
          .ok()) {
    seeds->push_back(ReadAll(path));
  }
  ::unlink(path.c_str());
}
