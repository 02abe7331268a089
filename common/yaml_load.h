// Loading a YAML text that may be hostile (a job file from a peer, a config from a user):
// the size is bounded before yaml-cpp sees it, and documents are counted with a bound.
// yaml-cpp 0.7's LoadAll never returns on some inputs (a lone "," yields empty documents
// without end, each one allocated, until memory runs out), so it is not used.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstddef>
#include <string>

namespace longhaul {

// Texts are site configs, job files and profiles of a few KiB; larger ones are refused.
inline constexpr size_t kMaxYamlBytes = 256 << 10;

struct YamlDocuments {
  YAML::Node first;         // the first document (null when there is none)
  int count = 0;            // documents seen, at most kMaxCounted
  YAML::Mark second_start;  // where the second document starts, when count > 1
  static constexpr int kMaxCounted = 16;
};

// The first document of `text` and how many there are (counting stops at kMaxCounted).
// Throws YAML::Exception as yaml-cpp does; the caller checks the size first.
YamlDocuments LoadYamlDocuments(const std::string& text);

// "expected one YAML document, found N" ("found 16 or more" at the counting bound).
std::string TooManyDocuments(const YamlDocuments& docs);

}  // namespace longhaul
