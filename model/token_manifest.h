// A token manifest: what `longhaul data prepare` writes beside its shards and what jobs read
// (`data: {train: DIR/manifest.json}`). The shards are llm.c token files (model/token_data.h:
// uint16 ids where the vocabulary allows, uint32 otherwise), so llm.c and other tools read
// them too; the manifest says, in JSON:
//   - the tokenizer they were made with (name, kind, SHA-256 of its file, vocabulary size,
//     end-of-text and beginning-of-text ids), so that a job can refuse data made for
//     another vocabulary;
//   - each split's shards ("train", "val"): file name (in the manifest's folder), token and
//     document counts, SHA-256 of the file;
//   - the source files (path as given, size, SHA-256, documents, bad input counts) and the
//     bad input found (count per reason, the first examples with file and line).
// A manifest is hostile input: LoadTokenManifest checks every field, and shard names are
// plain file names in the manifest's own folder (no '/', no '..').
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul::model {

inline constexpr const char* kManifestFormat = "longhaul-token-manifest";
inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestFileName = "manifest.json";

struct ManifestTokenizer {
  std::string name;    // "gpt2", "cl100k_base", "tokenizer.json", ...
  std::string kind;    // "tiktoken" or "huggingface"
  std::string sha256;  // of the tokenizer's file (rank file or tokenizer.json)
  uint32_t vocab_size = 0;
  std::optional<uint32_t> eot_id, bos_id;
};

struct ManifestShard {
  std::string file;  // plain file name in the manifest's folder
  int64_t tokens = 0;
  int64_t documents = 0;  // documents that end in this shard
  std::string sha256;     // of the whole file
};

struct ManifestSource {
  std::string path;  // as given to data prepare
  int64_t bytes = 0;
  std::string sha256;
  int64_t documents = 0;      // documents read from it
  int64_t bad_documents = 0;  // skipped (bad_input says why)
  int64_t replaced_utf8 = 0;  // documents whose invalid UTF-8 became U+FFFD
};

struct BadInputExample {
  std::string file;
  int64_t line = 0;  // 1-based
  std::string reason;
};

struct TokenManifest {
  // Where it was read from (shard files live beside it); empty when built in memory.
  std::string dir;
  ManifestTokenizer tokenizer;
  int token_bits = 16;  // 16 or 32: the shards' id width
  std::vector<ManifestShard> train, val;
  std::vector<ManifestSource> sources;
  int64_t bad_documents = 0;
  std::map<std::string, int64_t> bad_by_reason;
  std::vector<BadInputExample> bad_examples;  // the first few

  const std::vector<ManifestShard>& split(bool val_split) const { return val_split ? val : train; }
  int64_t Tokens(bool val_split) const;
  // dir/file of a shard.
  std::string ShardPath(const ManifestShard& shard) const;
};

// The manifest as JSON text (keys in a fixed order, one shard per line).
std::string TokenManifestToJson(const TokenManifest& manifest);

// Whether `path` names a manifest rather than a token or text file: a folder (holding
// manifest.json), or a file whose name ends in ".json".
bool IsManifestPath(const std::string& path);
// The manifest file of `path`: PATH/manifest.json for a folder, else `path`.
std::string ManifestFile(const std::string& path);

// Reads `path` (a manifest file, or a folder holding manifest.json). Errors name the file
// and the field: "MANIFEST: train[3].tokens: -5 is not a token count". Shard files are not
// opened (ReadManifestShard does that).
StatusOr<TokenManifest> LoadTokenManifest(const std::string& path);
// The same from text already read; `dir` is where its shards are.
StatusOr<TokenManifest> ParseTokenManifest(const std::string& text, const std::string& what,
                                           const std::string& dir);

// Reads shard `index` of a split and checks it against the manifest: an llm.c token file
// with the manifest's width and token count, every id below the tokenizer's vocabulary,
// and (verify_hash) its SHA-256. Errors name the shard's path and what differs.
StatusOr<std::vector<uint32_t>> ReadManifestShard(const TokenManifest& manifest, bool val_split,
                                                  size_t index, bool verify_hash);

}  // namespace longhaul::model
