// Token streams the trainer reads: llm.c's tokenized data files (a header of 256 int32:
// magic 20240520, version 1, token count; then the tokens as uint16), plain text read as
// bytes (vocabulary 256), and the built-in corpus (model/corpus.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul::model {

inline constexpr int kTokenFileMagic = 20240520;
inline constexpr int kTokenFileVersion = 1;

enum class DataFormat {
  kAuto,  // llm.c when the file starts with the token-file magic, text otherwise
  kLlmc,
  kText,
};

// "auto", "llmc", "text" <-> DataFormat.
StatusOr<DataFormat> ParseDataFormat(const std::string& name);
const char* DataFormatName(DataFormat format);

struct TokenData {
  std::string source;  // file path, or "builtin"
  DataFormat format = DataFormat::kText;
  std::vector<uint16_t> tokens;
  int max_token = -1;  // largest token id (-1 when empty)
};

// Reads `path` in `format`. Errors: missing file, bad magic or version (llmc), a token
// count that does not match the file size (truncated), an empty file.
StatusOr<TokenData> ReadTokenData(const std::string& path, DataFormat format);

// `text` as byte tokens.
TokenData TokensFromText(const std::string& text, const std::string& source);

// Writes `tokens` as an llm.c token file (atomically).
Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens);

// OK when every token is below `vocab_size`; otherwise names the first bad token and its
// position.
Status CheckTokensFit(const TokenData& data, int vocab_size);

}  // namespace longhaul::model
