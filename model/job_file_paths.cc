// Rewriting a job file's relative paths in place, for `longhaul submit` (job_file_paths.h).
#include "model/job_file_paths.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/yaml_load.h"
#include "model/job.h"

namespace longhaul::model {
namespace {

Status ErrorAt(const std::string& source, const YAML::Mark& mark, const std::string& key,
               const std::string& problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", mark.line + 1, ":", mark.column + 1, ": ", key, ": ", problem));
}

// A YAML double-quoted scalar holding `s` exactly.
std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// The length in `text` of the scalar token at `pos` whose value is `value`, or 0 when the
// source there is not that scalar on one line (then it is not rewritten).
size_t ScalarLength(const std::string& text, size_t pos, const std::string& value) {
  if (pos >= text.size()) return 0;
  const char open = text[pos];
  if (open == '"' || open == '\'') {
    for (size_t i = pos + 1; i < text.size() && text[i] != '\n'; ++i) {
      if (open == '"' && text[i] == '\\') {
        ++i;
      } else if (text[i] == open) {
        if (open == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
          ++i;  // '' is a quote inside a single-quoted scalar
          continue;
        }
        return i + 1 - pos;
      }
    }
    return 0;
  }
  if (text.compare(pos, value.size(), value) != 0) return 0;
  return value.size();
}

}  // namespace

StatusOr<std::string> AbsoluteJobPaths(const std::string& text, const std::string& source,
                                       const std::string& base_dir) {
  if (text.size() > kMaxYamlBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the file is ", text.size(), " bytes, more than the limit of ", kMaxYamlBytes));
  }
  YAML::Node root;
  try {
    const YamlDocuments docs = LoadYamlDocuments(text);
    if (docs.count > 1) return ErrorAt(source, docs.second_start, "(root)", TooManyDocuments(docs));
    root = docs.first;
  } catch (const YAML::Exception& e) {
    return ErrorAt(source, e.mark, "(root)", absl::StrCat("invalid YAML: ", e.msg));
  }
  // Anything else wrong with the file is the daemon's to say, with its own line numbers.
  if (!root.IsMap()) return text;

  struct Site {
    std::string key;
    YAML::Node node;
  };
  std::vector<Site> paths;
  auto add = [&paths](const std::string& key, const YAML::Node& node) {
    if (node && node.IsScalar()) paths.push_back({key, node});
  };
  try {
    add("init_from", root["init_from"]);
    if (const YAML::Node data = root["data"]; data && data.IsMap()) {
      add("data.train", data["train"]);
      if (const YAML::Node train = data["train"]; train && train.IsSequence()) {
        for (size_t i = 0; i < train.size(); ++i) {
          if (train[i].IsMap())
            add(absl::StrCat("data.train[", i, "].manifest"), train[i]["manifest"]);
        }
      }
      add("data.val", data["val"]);
    }
    if (const YAML::Node c = root["checkpoint"]; c && c.IsMap()) add("checkpoint.dir", c["dir"]);
  } catch (const YAML::Exception& e) {
    return text;  // duplicate keys and the like: the daemon names them
  }

  std::map<size_t, std::pair<size_t, std::string>> edits;  // pos -> (length, replacement)
  for (const Site& p : paths) {
    const std::string value = p.node.Scalar();
    if (value.empty() || (p.key.rfind("data.", 0) == 0 && value == kBuiltinData)) continue;
    if (std::filesystem::path(value).is_absolute()) continue;
    const YAML::Mark mark = p.node.Mark();
    const size_t length = mark.is_null() ? 0 : ScalarLength(text, size_t(mark.pos), value);
    if (length == 0) {
      return ErrorAt(source, mark, p.key,
                     "relative path '" + value +
                         "' cannot be made absolute in place (write it as a plain or quoted "
                         "string on one line, or give an absolute path)");
    }
    const std::string absolute = (std::filesystem::path(base_dir) / value).lexically_normal();
    edits[size_t(mark.pos)] = {length, Quoted(absolute)};
  }
  std::string out = text;
  for (auto it = edits.rbegin(); it != edits.rend(); ++it) {
    out.replace(it->first, it->second.first, it->second.second);
  }
  return out;
}

}  // namespace longhaul::model
