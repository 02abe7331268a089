// A YAML tree walker whose every error names file:line:column and the key path ("FILE:3:7:
// peers[1].address: problem"): unknown keys (with a "did you mean"), duplicate keys, wrong
// kinds, numbers out of range. The one walker of every YAML file longhaul reads: the site
// config (daemon/config.cc), job files (model/job.cc, daemon/job/spec/job_spec.cc) and profiles
// (scheduler/profiles_yaml.cc).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/status.h"
#include "common/yaml_load.h"

namespace longhaul {

class YamlWalker {
 public:
  // A value with the key that names it (the key's mark locates a missing or empty value).
  struct Entry {
    YAML::Node key;
    YAML::Node value;
    std::string path;  // "optimizer.lr"; "" for the root
  };
  using Fields = std::map<std::string, Entry, std::less<>>;

  // `source` names the file in messages; `what` says what it is ("the file", "the config").
  explicit YamlWalker(std::string source, std::string what = "the file")
      : source_(std::move(source)), what_(std::move(what)) {}

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
  // The text of scalar `e`, which may be empty; `what` names the expected value ("a number").
  StatusOr<std::string> Scalar(const Entry& e, absl::string_view what) const;
  // true or false.
  StatusOr<bool> Bool(const Entry& e) const;
  // The items of list `e`, each with its path ("peers[2]").
  StatusOr<std::vector<Entry>> List(const Entry& e) const;
  // A problem a check reported about `at` (OK stays OK), located there.
  Status Locate(const Status& status, const Entry& at) const;
  StatusOr<int64_t> Int(const Entry& e, int64_t min, int64_t max) const;
  StatusOr<uint64_t> Uint64(const Entry& e) const;
  StatusOr<double> Double(const Entry& e, double min, double max) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::string what_;
};

// The entry of `known` closest to a misspelled `key`, or "" when none is close.
std::string ClosestKey(absl::string_view key, const std::vector<absl::string_view>& known);

}  // namespace longhaul
