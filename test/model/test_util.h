// Helpers shared by the model tests: runfile paths, scratch directories, float file I/O and
// tensor comparison with an error relative to the reference tensor's scale.
#pragma once

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace longhaul::model::testing {

// Path of a file of this workspace in the test's runfiles.
inline std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return srcdir == nullptr ? path : std::string(srcdir) + "/longhaul/" + path;
}

// A fresh directory under the test's temporary directory.
inline std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = std::string(tmp == nullptr ? "/tmp" : tmp) + "/" + name;
  std::string cmd = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) return "/tmp";
  return dir;
}

inline std::vector<float> ReadFloats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<float> v(in ? size_t(in.tellg()) / sizeof(float) : 0);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  return v;
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
