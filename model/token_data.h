// Token streams the trainer reads: llm.c's tokenized data files, plain text read as bytes
// (vocabulary 256), and the built-in corpus (model/corpus.h).
//
// llm.c writes two kinds of token file, told apart by the magic of their header (256
// int32, little-endian: magic, version, token count, then zeros):
//   GPT-2:    magic 20240520, version 1, the tokens as uint16 (vocabularies up to 65536);
//   llama-3:  magic 20240801, version 7, the tokens as uint32 (little-endian).
// Both are read into 32-bit ids. The model's ids are int32, so an id above INT32_MAX in a
// uint32 file is an error, never wrapped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul::model {

inline constexpr int kTokenFileMagic = 20240520;  // GPT-2: uint16 tokens
inline constexpr int kTokenFileVersion = 1;
inline constexpr int kTokenFileMagic32 = 20240801;  // llama-3: uint32 tokens
inline constexpr int kTokenFileVersion32 = 7;

enum class DataFormat {
  kAuto,  // llm.c when the file starts with either token-file magic, text otherwise
  kLlmc,  // either kind of llm.c token file (the magic says which)
  kText,
};

// "auto", "llmc", "text" <-> DataFormat.
StatusOr<DataFormat> ParseDataFormat(const std::string& name);
const char* DataFormatName(DataFormat format);

struct TokenData {
  std::string source;  // file path, or "builtin"
  DataFormat format = DataFormat::kText;
  std::vector<uint32_t> tokens;  // every id <= INT32_MAX when read from a file
  int64_t max_token = -1;        // largest token id (-1 when empty)
};

// Reads `path` in `format`. Errors: missing file, bad magic or a version that is not its
// magic's (llmc), a token count that does not match the file size (truncated), an empty
// file, an id above INT32_MAX (uint32 files; names its position).
StatusOr<TokenData> ReadTokenData(const std::string& path, DataFormat format);

// `text` as byte tokens.
TokenData TokensFromText(const std::string& text, const std::string& source);

// Which kind of llm.c token file WriteTokenFile writes.
enum class TokenWidth {
  kAuto,  // uint16 when every id is below 65536, uint32 otherwise
  kU16,   // GPT-2's kind; an id >= 65536 is an error
  kU32,   // llama-3's kind
};

// Writes `tokens` as an llm.c token file of `width` (atomically). Errors name the first id
// that does not fit and its position: >= 65536 for kU16, above INT32_MAX for any width (the
// reader refuses those); more than INT32_MAX tokens (the header's count is an int32).
Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens,
                      TokenWidth width = TokenWidth::kAuto);

// OK when every token is below `vocab_size` (any positive int, up to 2^31 - 1); otherwise
// names the first bad token and its position.
Status CheckTokensFit(const TokenData& data, int vocab_size);

}  // namespace longhaul::model
