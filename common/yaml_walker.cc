// YAML walking with located errors (see yaml_walker.h).
#include "common/yaml_walker.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace longhaul {
namespace {

std::string Kind(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (node.IsScalar()) return absl::StrCat("'", node.Scalar(), "'");
  return "nothing";
}

std::string Join(const std::string& path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string ClosestKey(absl::string_view key, const std::vector<absl::string_view>& known) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, key.size() / 3) + 1;
  for (absl::string_view k : known) {
    size_t d = EditDistance(key, k);
    // A key cut short ("heartbeat" for "heartbeat_interval_seconds") is close too.
    if (key.size() >= 4 && k.substr(0, key.size()) == key) d = 1;
    if (d < best_distance) {
      best_distance = d;
      best = std::string(k);
    }
  }
  return best;
}

StatusOr<YamlWalker::Entry> YamlWalker::Root(const std::string& text) const {
  if (text.size() > kMaxYamlBytes) {
    return Error(
        YAML::Mark::null_mark(), "",
        absl::StrCat(what_, " is ", text.size(), " bytes, more than the limit of ", kMaxYamlBytes));
  }
  try {
    const YamlDocuments docs = LoadYamlDocuments(text);
    if (docs.count > 1) return Error(docs.second_start, "", TooManyDocuments(docs));
    if (docs.count == 0 || docs.first.IsNull()) {
      return Error(YAML::Mark::null_mark(), "", absl::StrCat(what_, " is empty"));
    }
    return Entry{docs.first, docs.first, ""};
  } catch (const YAML::Exception& e) {
    return Error(e.mark, "", absl::StrCat("invalid YAML: ", e.msg));
  }
}

Status YamlWalker::Error(const YAML::Mark& mark, const std::string& path,
                         absl::string_view problem) const {
  const int line = mark.is_null() ? 1 : mark.line + 1;
  const int column = mark.is_null() ? 1 : mark.column + 1;
  return absl::InvalidArgumentError(absl::StrCat(source_, ":", line, ":", column, ": ",
                                                 path.empty() ? "(root)" : path, ": ", problem));
}

Status YamlWalker::Error(const Entry& at, absl::string_view problem) const {
  return Error(at.value.IsNull() ? at.key.Mark() : at.value.Mark(), at.path, problem);
}

Status YamlWalker::Missing(const Entry& map, absl::string_view key) const {
  return Error(map.value.Mark(), Join(map.path, key), "missing required key");
}

StatusOr<YamlWalker::Fields> YamlWalker::Map(const Entry& e,
                                             const std::vector<absl::string_view>& known) const {
  if (!e.value.IsMap()) return Error(e, absl::StrCat("expected a map, got ", Kind(e.value)));
  Fields fields;
  for (auto it = e.value.begin(); it != e.value.end(); ++it) {
    if (!it->first.IsScalar()) return Error(it->first.Mark(), e.path, "keys must be strings");
    const std::string name = it->first.Scalar();
    const std::string path = Join(e.path, name);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string problem = absl::StrCat("unknown key '", name, "'");
      const std::string hint = ClosestKey(name, known);
      if (!hint.empty()) absl::StrAppend(&problem, " (did you mean '", hint, "'?)");
      return Error(it->first.Mark(), path, problem);
    }
    if (!fields.emplace(name, Entry{it->first, it->second, path}).second) {
      return Error(it->first.Mark(), path, "duplicate key");
    }
  }
  return fields;
}

StatusOr<std::string> YamlWalker::Scalar(const Entry& e, absl::string_view what) const {
  if (!e.value.IsScalar()) {
    return Error(e, absl::StrCat("expected ", what, ", got ", Kind(e.value)));
  }
  return e.value.Scalar();
}

StatusOr<bool> YamlWalker::Bool(const Entry& e) const {
  ASSIGN_OR_RETURN(std::string text, Scalar(e, "true or false"));
  if (text != "true" && text != "false") {
    return Error(e, absl::StrCat("expected true or false, got '", text, "'"));
  }
  return text == "true";
}

StatusOr<std::vector<YamlWalker::Entry>> YamlWalker::List(const Entry& e) const {
  if (!e.value.IsSequence()) return Error(e, absl::StrCat("expected a list, got ", Kind(e.value)));
  std::vector<Entry> items;
  for (size_t i = 0; i < e.value.size(); ++i) {
    items.push_back(Entry{e.value[i], e.value[i], absl::StrCat(e.path, "[", i, "]")});
  }
  return items;
}

Status YamlWalker::Locate(const Status& status, const Entry& at) const {
  return status.ok() ? status : Error(at, status.message());
}

StatusOr<std::string> YamlWalker::String(const Entry& e) const {
  ASSIGN_OR_RETURN(std::string text, Scalar(e, "a string"));
  if (text.empty()) return Error(e, "must not be empty");
  return text;
}

StatusOr<int64_t> YamlWalker::Int(const Entry& e, int64_t min, int64_t max) const {
  ASSIGN_OR_RETURN(std::string text, Scalar(e, "a whole number"));
  int64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) {
    return Error(e, absl::StrCat("expected a whole number, got '", text, "'"));
  }
  if (v < min || v > max) {
    return Error(e, absl::StrCat("must be in [", min, ", ", max, "], got ", v));
  }
  return v;
}

StatusOr<uint64_t> YamlWalker::Uint64(const Entry& e) const {
  ASSIGN_OR_RETURN(std::string text, Scalar(e, "a whole number"));
  uint64_t v = 0;
  if (!absl::SimpleAtoi(text, &v)) {
    return Error(e, absl::StrCat("expected a non-negative whole number, got '", text, "'"));
  }
  return v;
}

StatusOr<double> YamlWalker::Double(const Entry& e, double min, double max) const {
  ASSIGN_OR_RETURN(std::string text, Scalar(e, "a number"));
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) {
    return Error(e, absl::StrCat("expected a number, got '", text, "'"));
  }
  if (v < min || v > max) {
    return Error(e, absl::StrCat("must be in [", min, ", ", max, "], got ", text));
  }
  return v;
}

}  // namespace longhaul
