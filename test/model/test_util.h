// Helpers shared by the model tests (and by data tests: js_reference, prepare_test): runfile
// paths, scratch directories, float file I/O, the first batch of a token file, and tensor
// comparison with an error relative to the reference tensor's scale.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "model/data_loader.h"
#include "model/token_data.h"

namespace longhaul::model::testing {

// Path of a file of this workspace in the test's runfiles.
inline std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return srcdir == nullptr ? path : std::string(srcdir) + "/longhaul/" + path;
}

// A fresh (empty) directory `name` under the test's temporary directory: whatever an earlier
// call left there is removed. Throws std::filesystem::filesystem_error when it cannot.
inline std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp == nullptr ? "/tmp" : tmp) + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<float> v(in ? size_t(in.tellg()) / sizeof(float) : 0);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
}

// The inputs and targets of one batch (batch_size x seq_len ids each).
struct Batch {
  std::vector<int32_t> inputs, targets;
};

// The first batch a DataLoader gives from the token file at `path` (read as `format`), in
// file order (no shuffling): what a reference script that reads the file from its start sees.
inline StatusOr<Batch> FirstBatch(const std::string& path, DataFormat format, int batch_size,
                                  int seq_len) {
  ASSIGN_OR_RETURN(TokenData data, ReadTokenData(path, format));
  DataLoaderOptions options;
  options.batch_size = batch_size;
  options.seq_len = seq_len;
  options.shuffle = false;
  ASSIGN_OR_RETURN(std::unique_ptr<DataLoader> loader,
                   DataLoader::Create(std::make_shared<const TokenData>(std::move(data)), options));
  Batch batch{std::vector<int32_t>(size_t(batch_size) * seq_len),
              std::vector<int32_t>(size_t(batch_size) * seq_len)};
  RETURN_IF_ERROR(loader->Next(batch.inputs.data(), batch.targets.data()));
  return batch;
}

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// max |a - b| / max |b| over n elements (0 when both are all zero); infinity when either
// holds a NaN (std::max would drop it, and a NaN must fail every tolerance).
inline double RelError(const float* a, const float* b, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return scale == 0 ? diff : diff / scale;
}

}  // namespace longhaul::model::testing
