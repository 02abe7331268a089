// A YAML tree walker whose every error names file:line:column and the key path, in the
// style of the site config (daemon/config.cc): unknown keys (with a "did you mean"),
// duplicate keys, wrong kinds, numbers out of range. Used by the job file parser.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/status.h"
#include "common/yaml_load.h"

namespace longhaul::model {

class YamlWalker {
 public:
  // A value with the key that names it (the key's mark locates a missing or empty value).
  struct Entry {
    YAML::Node key;
    YAML::Node value;
    std::string path;  // "optimizer.lr"; "" for the root
  };
  using Fields = std::map<std::string, Entry, std::less<>>;

  explicit YamlWalker(std::string source) : source_(std::move(source)) {}

  // The single document of `text` as the root entry; InvalidArgument for a text over
  // kMaxYamlBytes (common/yaml_load.h), invalid YAML or more than one document.
  StatusOr<Entry> Root(const std::string& text) const;

  Status Error(const YAML::Mark& mark, const std::string& path, absl::string_view problem) const;
  Status Error(const Entry& at, absl::string_view problem) const;
  // The error for a missing required key of map `map`.
  Status Missing(const Entry& map, absl::string_view key) const;

  // The fields of map `e`, after checking that every key is in `known` and appears once.
  StatusOr<Fields> Map(const Entry& e, const std::vector<absl::string_view>& known) const;
  // Scalars of each kind; `what` in messages. Numbers reject inf and nan.
  StatusOr<std::string> String(const Entry& e) const;
  StatusOr<int64_t> Int(const Entry& e, int64_t min, int64_t max) const;
  StatusOr<uint64_t> Uint64(const Entry& e) const;
  StatusOr<double> Double(const Entry& e, double min, double max) const;

  const std::string& source() const { return source_; }

 private:
  StatusOr<std::string> Scalar(const Entry& e, absl::string_view what) const;
  std::string source_;
};

// The entry of `known` closest to a misspelled `key`, or "" when none is close.
std::string ClosestKey(absl::string_view key, const std::vector<absl::string_view>& known);

}  // namespace longhaul::model
