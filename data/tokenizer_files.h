// A tokenizer from the file a model came with, for `longhaul data prepare|inspect`:
//   - a Hugging Face tokenizer.json (a file ending in ".json", or a folder holding one);
//   - a tiktoken rank file ("cl100k_base.tiktoken", ...) with its encoding's name, given or
//     taken from the file's name (gpt2, r50k_base, cl100k_base).
// With what a manifest records about it: kind, name and the SHA-256 of the file.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "data/tokenizer.h"
#include "model/token_manifest.h"

namespace longhaul::data {

struct LoadedTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;
  model::ManifestTokenizer info;  // kind, name, sha256, vocab_size, eot_id, bos_id
  std::optional<TokenId> bos_id;
};

// `encoding` names the tiktoken encoding of a rank file ("" : from the file's name).
StatusOr<LoadedTokenizer> LoadTokenizerFile(const std::string& path, const std::string& encoding);

}  // namespace longhaul::data
