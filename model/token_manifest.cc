// Reading, checking and writing token manifests (see token_manifest.h).
#include "model/token_manifest.h"

#include <sys/stat.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/json_load.h"
#include "common/sha256.h"
#include "model/file_io.h"
#include "model/token_data.h"

namespace longhaul::model {
namespace {

using nlohmann::json;

// Every site parses a job's manifests at submit, so they are bounded: a shard's line is about
// 150 bytes and a source's about 200 (600,000 source files fit).
constexpr int64_t kMaxManifestBytes = int64_t{128} << 20;
constexpr size_t kMaxExamples = 1000;

std::string Quote(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

// Field readers: each names the manifest and the field in its error.
class Fields {
 public:
  Fields(const json& object, std::string what) : object_(object), what_(std::move(what)) {}

  Status CheckObject() const {
    if (!object_.is_object()) return Error("", absl::StrCat(Quote(object_), " is not an object"));
    return absl::OkStatus();
  }
  StatusOr<const json*> Get(const std::string& key, bool required = true) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      if (!required) return static_cast<const json*>(nullptr);
      return Error(key, "missing");
    }
    return &*it;
  }
  StatusOr<std::string> String(const std::string& key, bool required = true) const {
    ASSIGN_OR_RETURN(const json* v, Get(key, required));
    if (v == nullptr) return std::string();
    if (!v->is_string()) return Error(key, absl::StrCat(Quote(*v), " is not a string"));
    return v->get<std::string>();
  }
  StatusOr<int64_t> Count(const std::string& key, int64_t max, bool required = true) const {
    ASSIGN_OR_RETURN(const json* v, Get(key, required));
    if (v == nullptr) return int64_t{0};
    if (!v->is_number_integer() ||
        (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(max)) || v->get<int64_t>() < 0 ||
        v->get<int64_t>() > max) {
      return Error(key, absl::StrCat(Quote(*v), " is not a count from 0 to ", max));
    }
    return v->get<int64_t>();
  }
  StatusOr<std::optional<uint32_t>> OptionalId(const std::string& key, uint32_t below) const {
    ASSIGN_OR_RETURN(const json* v, Get(key, false));
    if (v == nullptr) return std::optional<uint32_t>();
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() >= below) {
      return Error(key,
                   absl::StrCat(Quote(*v), " is not a token id below the vocabulary size ", below));
    }
    return std::optional<uint32_t>(static_cast<uint32_t>(v->get<int64_t>()));
  }
  StatusOr<std::string> Sha256(const std::string& key, bool required = true) const {
    ASSIGN_OR_RETURN(std::string s, String(key, required));
    if (s.empty() && !required) return s;
    bool ok = s.size() == 64;
    for (char c : s) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!ok)
      return Error(
          key, absl::StrCat("'", s.substr(0, 80), "' is not a SHA-256 (64 lowercase hex digits)"));
    return s;
  }
  Status Error(const std::string& key, const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat(what_, key.empty() || what_.back() == ' ' ? "" : ".", key, ": ", message));
  }
  const std::string& what() const { return what_; }

 private:
  const json& object_;
  std::string what_;
};

bool PlainFileName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 255) return false;
  for (char c : name) {
    if (c == '/' || c == '\0') return false;
  }
  return true;
}

Status ParseShards(const json& root, const std::string& what, const std::string& key,
                   std::unordered_set<std::string>* names, std::vector<ManifestShard>* shards) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return absl::OkStatus();  // no such split
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", key, ": ", Quote(*it), " is not a list of shards"));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    Fields f((*it)[i], absl::StrCat(what, ": ", key, "[", i, "]"));
    RETURN_IF_ERROR(f.CheckObject());
    ManifestShard s;
    ASSIGN_OR_RETURN(s.file, f.String("file"));
    if (!PlainFileName(s.file)) {
      return f.Error("file", absl::StrCat("'", s.file.substr(0, 80),
                                          "' is not a plain file name in the manifest's folder"));
    }
    ASSIGN_OR_RETURN(s.tokens, f.Count("tokens", std::numeric_limits<int32_t>::max()));
    ASSIGN_OR_RETURN(s.documents, f.Count("documents", std::numeric_limits<int32_t>::max()));
    ASSIGN_OR_RETURN(s.sha256, f.Sha256("sha256"));
    if (!names->insert(s.file).second) {
      return f.Error("file", absl::StrCat("'", s.file, "' is listed twice (in train or val)"));
    }
    shards->push_back(std::move(s));
  }
  return absl::OkStatus();
}

json ShardJson(const ManifestShard& s) {
  json j = json::object();
  j["file"] = s.file;
  j["tokens"] = s.tokens;
  j["documents"] = s.documents;
  j["sha256"] = s.sha256;
  return j;
}

}  // namespace

int64_t TokenManifest::Tokens(bool val_split) const {
  int64_t n = 0;
  for (const ManifestShard& s : split(val_split)) n += s.tokens;
  return n;
}

std::string TokenManifest::ShardPath(const ManifestShard& shard) const {
  return dir.empty() ? shard.file : absl::StrCat(dir, "/", shard.file);
}

std::string TokenManifestToJson(const TokenManifest& m) {
  // nlohmann's ordered_json keeps insertion order; shards one per line for people and diffs.
  nlohmann::ordered_json head;
  head["format"] = kManifestFormat;
  head["version"] = kManifestVersion;
  nlohmann::ordered_json tok;
  tok["name"] = m.tokenizer.name;
  tok["kind"] = m.tokenizer.kind;
  tok["sha256"] = m.tokenizer.sha256;
  tok["vocab_size"] = m.tokenizer.vocab_size;
  if (m.tokenizer.eot_id) tok["eot_id"] = *m.tokenizer.eot_id;
  if (m.tokenizer.bos_id) tok["bos_id"] = *m.tokenizer.bos_id;
  head["tokenizer"] = tok;
  head["token_bits"] = m.token_bits;
  std::string out = head.dump(2, ' ', false, json::error_handler_t::replace);
  out.pop_back();  // the closing brace: splits, sources and bad input follow
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  auto add_list = [&out](const std::string& key, const std::vector<std::string>& items) {
    absl::StrAppend(&out, ",\n  \"", key, "\": [");
    for (size_t i = 0; i < items.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "\n    " : ",\n    ", items[i]);
    }
    absl::StrAppend(&out, items.empty() ? "]" : "\n  ]");
  };
  for (bool val : {false, true}) {
    std::vector<std::string> items;
    for (const ManifestShard& s : m.split(val))
      items.push_back(ShardJson(s).dump(-1, ' ', false, json::error_handler_t::replace));
    add_list(val ? "val" : "train", items);
  }
  std::vector<std::string> sources;
  for (const ManifestSource& s : m.sources) {
    nlohmann::ordered_json j;
    j["path"] = s.path;
    j["bytes"] = s.bytes;
    j["sha256"] = s.sha256;
    j["documents"] = s.documents;
    j["bad_documents"] = s.bad_documents;
    j["replaced_utf8"] = s.replaced_utf8;
    sources.push_back(j.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  add_list("sources", sources);
  nlohmann::ordered_json bad;
  bad["documents"] = m.bad_documents;
  bad["by_reason"] = m.bad_by_reason;
  nlohmann::ordered_json examples = nlohmann::ordered_json::array();
  for (const BadInputExample& e : m.bad_examples) {
    nlohmann::ordered_json j;
    j["file"] = e.file;
    j["line"] = e.line;
    j["reason"] = e.reason;
    examples.push_back(j);
  }
  bad["examples"] = examples;
  absl::StrAppend(&out,
                  ",\n  \"bad_input\": ", bad.dump(-1, ' ', false, json::error_handler_t::replace),
                  "\n}\n");
  return out;
}

StatusOr<TokenManifest> ParseTokenManifest(const std::string& text, const std::string& what,
                                           const std::string& dir) {
  ASSIGN_OR_RETURN(json root, ParseUntrustedJson(text.data(), text.size(), what));
  Fields top(root, what + ": ");
  RETURN_IF_ERROR(top.CheckObject());
  ASSIGN_OR_RETURN(std::string format, top.String("format"));
  if (format != kManifestFormat) {
    return top.Error("format",
                     absl::StrCat("'", format.substr(0, 80), "', want '", kManifestFormat,
                                  "' (is this a token manifest from `longhaul data prepare`?)"));
  }
  ASSIGN_OR_RETURN(int64_t version, top.Count("version", 1 << 20));
  if (version != kManifestVersion) {
    return top.Error("version",
                     absl::StrCat(version, " is not supported (this build reads version ",
                                  kManifestVersion, ")"));
  }
  TokenManifest m;
  m.dir = dir;
  ASSIGN_OR_RETURN(const json* tok_json, top.Get("tokenizer"));
  Fields tok(*tok_json, what + ": tokenizer");
  RETURN_IF_ERROR(tok.CheckObject());
  ASSIGN_OR_RETURN(m.tokenizer.name, tok.String("name"));
  ASSIGN_OR_RETURN(m.tokenizer.kind, tok.String("kind"));
  ASSIGN_OR_RETURN(m.tokenizer.sha256, tok.Sha256("sha256"));
  ASSIGN_OR_RETURN(int64_t vocab, tok.Count("vocab_size", std::numeric_limits<int32_t>::max()));
  if (vocab == 0) return tok.Error("vocab_size", "0 is not a vocabulary size");
  m.tokenizer.vocab_size = static_cast<uint32_t>(vocab);
  ASSIGN_OR_RETURN(m.tokenizer.eot_id, tok.OptionalId("eot_id", m.tokenizer.vocab_size));
  ASSIGN_OR_RETURN(m.tokenizer.bos_id, tok.OptionalId("bos_id", m.tokenizer.vocab_size));
  ASSIGN_OR_RETURN(int64_t bits, top.Count("token_bits", 64));
  if (bits != 16 && bits != 32)
    return top.Error("token_bits", absl::StrCat(bits, " is not 16 or 32"));
  if (bits == 16 && vocab > 65536) {
    return top.Error("token_bits", absl::StrCat("16 cannot hold the vocabulary's ", vocab, " ids"));
  }
  m.token_bits = static_cast<int>(bits);
  std::unordered_set<std::string> names;  // every shard's file, once across both splits
  RETURN_IF_ERROR(ParseShards(root, what, "train", &names, &m.train));
  RETURN_IF_ERROR(ParseShards(root, what, "val", &names, &m.val));
  if (auto it = root.find("sources"); it != root.end() && it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      Fields f((*it)[i], absl::StrCat(what, ": sources[", i, "]"));
      RETURN_IF_ERROR(f.CheckObject());
      ManifestSource s;
      ASSIGN_OR_RETURN(s.path, f.String("path"));
      ASSIGN_OR_RETURN(s.bytes, f.Count("bytes", std::numeric_limits<int64_t>::max()));
      ASSIGN_OR_RETURN(s.sha256, f.Sha256("sha256", false));
      ASSIGN_OR_RETURN(s.documents,
                       f.Count("documents", std::numeric_limits<int64_t>::max(), false));
      ASSIGN_OR_RETURN(s.bad_documents,
                       f.Count("bad_documents", std::numeric_limits<int64_t>::max(), false));
      ASSIGN_OR_RETURN(s.replaced_utf8,
                       f.Count("replaced_utf8", std::numeric_limits<int64_t>::max(), false));
      m.sources.push_back(std::move(s));
    }
  }
  if (auto it = root.find("bad_input"); it != root.end() && it->is_object()) {
    Fields f(*it, what + ": bad_input");
    ASSIGN_OR_RETURN(m.bad_documents,
                     f.Count("documents", std::numeric_limits<int64_t>::max(), false));
    if (auto r = it->find("by_reason"); r != it->end() && r->is_object()) {
      for (const auto& [reason, count] : r->items()) {
        if (count.is_number_integer() && count.get<int64_t>() >= 0)
          m.bad_by_reason[reason] = count.get<int64_t>();
      }
    }
    if (auto e = it->find("examples"); e != it->end() && e->is_array()) {
      for (size_t i = 0; i < e->size() && i < kMaxExamples; ++i) {
        Fields ef((*e)[i], absl::StrCat(what, ": bad_input.examples[", i, "]"));
        RETURN_IF_ERROR(ef.CheckObject());
        BadInputExample ex;
        ASSIGN_OR_RETURN(ex.file, ef.String("file"));
        ASSIGN_OR_RETURN(ex.line, ef.Count("line", std::numeric_limits<int64_t>::max()));
        ASSIGN_OR_RETURN(ex.reason, ef.String("reason"));
        m.bad_examples.push_back(std::move(ex));
      }
    }
  }
  return m;
}

bool IsManifestPath(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return true;
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
}

std::string ManifestFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::StrCat(path, path.empty() || path.back() == '/' ? "" : "/", kManifestFileName);
  }
  return path;
}

StatusOr<TokenManifest> LoadTokenManifest(const std::string& path) {
  const std::string file = ManifestFile(path);
  ASSIGN_OR_RETURN(int64_t size, FileSize(file, "token manifest"));
  if (size > kMaxManifestBytes) {
    return absl::InvalidArgumentError(absl::StrCat("token manifest '", file, "' is ", size,
                                                   " bytes, more than the ", kMaxManifestBytes,
                                                   " a manifest may be"));
  }
  std::string text(static_cast<size_t>(size), '\0');
  RETURN_IF_ERROR(ReadFileRange(file, "token manifest", 0, text.data(), text.size()));
  const size_t slash = file.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : file.substr(0, slash == 0 ? 1 : slash);
  return ParseTokenManifest(text, absl::StrCat("token manifest '", file, "'"), dir);
}

StatusOr<std::vector<uint32_t>> ReadManifestShard(const TokenManifest& manifest, bool val_split,
                                                  size_t index, bool verify_hash) {
  const std::vector<ManifestShard>& shards = manifest.split(val_split);
  if (index >= shards.size()) {
    return absl::OutOfRangeError(absl::StrCat("the manifest has ", shards.size(), " ",
                                              val_split ? "val" : "train", " shards, not ",
                                              index + 1));
  }
  const ManifestShard& shard = shards[index];
  const std::string path = manifest.ShardPath(shard);
  if (verify_hash) {
    ASSIGN_OR_RETURN(std::string sha, Sha256OfFile(path, "token shard"));
    if (sha != shard.sha256) {
      return absl::DataLossError(absl::StrCat("token shard '", path,
                                              "' is corrupt: its SHA-256 is ", sha,
                                              ", the manifest says ", shard.sha256));
    }
  }
  ASSIGN_OR_RETURN(TokenData data, ReadTokenData(path, DataFormat::kLlmc));
  if (static_cast<int64_t>(data.tokens.size()) != shard.tokens) {
    return absl::DataLossError(absl::StrCat("token shard '", path, "' holds ", data.tokens.size(),
                                            " tokens, the manifest says ", shard.tokens));
  }
  if (data.max_token >= static_cast<int64_t>(manifest.tokenizer.vocab_size)) {
    return absl::DataLossError(absl::StrCat("token shard '", path, "' holds id ", data.max_token,
                                            ", outside the tokenizer's vocabulary of ",
                                            manifest.tokenizer.vocab_size, " (",
                                            manifest.tokenizer.name, ")"));
  }
  return std::move(data.tokens);
}

}  // namespace longhaul::model
