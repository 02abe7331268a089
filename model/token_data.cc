// Reading llm.c token files and text-as-bytes (see token_data.h).
#include "model/token_data.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/file_io.h"

namespace longhaul::model {
namespace {

constexpr int kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

void ComputeMax(TokenData* data) {
  data->max_token =
      data->tokens.empty() ? -1 : int(*std::max_element(data->tokens.begin(), data->tokens.end()));
}

StatusOr<TokenData> ReadLlmc(const std::string& path, int64_t size) {
  if (size < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat("token file '", path, "' is truncated: ", size,
                                            " bytes, shorter than the 1024-byte header"));
  }
  int32_t header[kHeaderInts];
  RETURN_IF_ERROR(ReadFileRange(path, "token file", 0, header, kHeaderBytes));
  if (header[0] != kTokenFileMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not an llm.c token file: bad magic ", header[0],
                     " (expected ", kTokenFileMagic, "); use format: text for plain text"));
  }
  if (header[1] != kTokenFileVersion) {
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' has version ",
                                                   header[1], "; only version ", kTokenFileVersion,
                                                   " is supported"));
  }
  const int64_t count = header[2];
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "' has a negative token count ", count));
  }
  const int64_t expected = kHeaderBytes + count * 2;
  if (size != expected) {
    return absl::DataLossError(
        absl::StrCat("token file '", path, "' has ", size, " bytes but its header says ", count,
                     " tokens, which need ", expected, size < expected ? " (truncated)" : ""));
  }
  TokenData data;
  data.source = path;
  data.format = DataFormat::kLlmc;
  data.tokens.resize(count);
  RETURN_IF_ERROR(ReadFileRange(path, "token file", kHeaderBytes, data.tokens.data(), count * 2));
  ComputeMax(&data);
  return data;
}

}  // namespace

StatusOr<DataFormat> ParseDataFormat(const std::string& name) {
  if (name == "auto") return DataFormat::kAuto;
  if (name == "llmc") return DataFormat::kLlmc;
  if (name == "text") return DataFormat::kText;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown data format '", name, "' (expected auto, llmc or text)"));
}

const char* DataFormatName(DataFormat format) {
  switch (format) {
    case DataFormat::kAuto:
      return "auto";
    case DataFormat::kLlmc:
      return "llmc";
    case DataFormat::kText:
      return "text";
  }
  return "?";
}

StatusOr<TokenData> ReadTokenData(const std::string& path, DataFormat format) {
  ASSIGN_OR_RETURN(const int64_t size, FileSize(path, "data file"));
  if (format == DataFormat::kAuto) {
    format = DataFormat::kText;
    if (size >= int64_t(sizeof(int32_t))) {
      int32_t magic = 0;
      RETURN_IF_ERROR(ReadFileRange(path, "data file", 0, &magic, sizeof(magic)));
      if (magic == kTokenFileMagic) format = DataFormat::kLlmc;
    }
  }
  if (format == DataFormat::kLlmc) return ReadLlmc(path, size);
  if (size == 0) return absl::InvalidArgumentError(absl::StrCat("data file '", path, "' is empty"));
  std::string text(size_t(size), '\0');
  RETURN_IF_ERROR(ReadFileRange(path, "data file", 0, text.data(), text.size()));
  return TokensFromText(text, path);
}

TokenData TokensFromText(const std::string& text, const std::string& source) {
  TokenData data;
  data.source = source;
  data.format = DataFormat::kText;
  data.tokens.assign(text.begin(), text.end());
  for (auto& t : data.tokens) t &= 0xFF;  // chars may be signed
  ComputeMax(&data);
  return data;
}

Status WriteTokenFile(const std::string& path, const std::vector<uint16_t>& tokens) {
  int32_t header[kHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = int32_t(tokens.size());
  AtomicFileWriter writer;
  RETURN_IF_ERROR(writer.Open(path));
  RETURN_IF_ERROR(writer.Write(header, sizeof(header)));
  RETURN_IF_ERROR(writer.Write(tokens.data(), tokens.size() * sizeof(uint16_t)));
  return writer.Commit();
}

Status CheckTokensFit(const TokenData& data, int vocab_size) {
  if (data.max_token < vocab_size) return absl::OkStatus();
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    if (data.tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("data '", data.source, "' holds token ", data.tokens[i], " at position ", i,
                       ", outside the model's vocabulary of ", vocab_size, " (largest token ",
                       data.max_token, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace longhaul::model
