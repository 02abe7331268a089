// Reading and writing llm.c token files (uint16 and uint32 ids) and text-as-bytes (see
// token_data.h).
#include "model/token_data.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "model/file_io.h"

namespace longhaul::model {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and this code reads host words directly");

constexpr int kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();

// One kind of llm.c token file.
struct FileKind {
  int32_t magic;
  int32_t version;
  int64_t width;     // bytes per token
  const char* name;  // for errors
};

constexpr FileKind kU16File = {kTokenFileMagic, kTokenFileVersion, 2, "GPT-2 (uint16 tokens)"};
constexpr FileKind kU32File = {kTokenFileMagic32, kTokenFileVersion32, 4,
                               "llama-3 (uint32 tokens)"};

const FileKind* KindOf(int32_t magic) {
  if (magic == kU16File.magic) return &kU16File;
  if (magic == kU32File.magic) return &kU32File;
  return nullptr;
}

void ComputeMax(TokenData* data) {
  data->max_token = data->tokens.empty()
                        ? -1
                        : int64_t(*std::max_element(data->tokens.begin(), data->tokens.end()));
}

StatusOr<TokenData> ReadLlmc(const std::string& path, int64_t size) {
  if (size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "' is empty (0 bytes; a token file starts with a ",
                     kHeaderBytes, "-byte header)"));
  }
  if (size < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat("token file '", path, "' is truncated: ", size,
                                            " bytes, shorter than the ", kHeaderBytes,
                                            "-byte header"));
  }
  int32_t header[kHeaderInts];
  RETURN_IF_ERROR(ReadFileRange(path, "token file", 0, header, kHeaderBytes));
  const FileKind* kind = KindOf(header[0]);
  if (kind == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not an llm.c token file: bad magic ", header[0],
                     " (expected ", kU16File.magic, " for uint16 tokens or ", kU32File.magic,
                     " for uint32 tokens); use format: text for plain text"));
  }
  if (header[1] != kind->version) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "' has magic ", header[0], " (llm.c ", kind->name,
                     ") and version ", header[1], "; that magic needs version ", kind->version));
  }
  const int64_t count = header[2];
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "' has a negative token count ", count));
  }
  const int64_t expected = kHeaderBytes + count * kind->width;
  if (size != expected) {
    return absl::DataLossError(
        absl::StrCat("token file '", path, "' has ", size, " bytes but its header says ", count,
                     " tokens of ", kind->width, " bytes, which need ", expected,
                     size < expected ? " (truncated)" : " (trailing bytes)"));
  }
  TokenData data;
  data.source = path;
  data.format = DataFormat::kLlmc;
  data.tokens.resize(size_t(count));
  RETURN_IF_ERROR(
      ReadFileRange(path, "token file", kHeaderBytes, data.tokens.data(), count * kind->width));
  if (kind->width == 2) {
    // The uint16 ids fill the first half of the buffer; widened in place from the back:
    // writing id i (bytes 4i..4i+3) never touches the ids still to widen (below byte 2i).
    const auto* bytes = reinterpret_cast<const unsigned char*>(data.tokens.data());
    for (int64_t i = count - 1; i >= 0; --i) {
      uint16_t id;
      std::memcpy(&id, bytes + 2 * i, sizeof(id));
      data.tokens[size_t(i)] = id;
    }
  } else {
    for (size_t i = 0; i < data.tokens.size(); ++i) {
      if (data.tokens[i] > kMaxId) {
        return absl::InvalidArgumentError(
            absl::StrCat("token file '", path, "' holds id ", data.tokens[i], " at position ", i,
                         ", above ", kMaxId, " (the model's token ids are int32)"));
      }
    }
  }
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
      if (KindOf(magic) != nullptr) format = DataFormat::kLlmc;
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
  data.tokens.reserve(text.size());
  for (const char c : text) data.tokens.push_back(static_cast<unsigned char>(c));
  ComputeMax(&data);
  return data;
}

Status WriteTokenFile(const std::string& path, const std::vector<uint32_t>& tokens,
                      TokenWidth width) {
  if (tokens.size() > size_t(kMaxId)) {
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "': ", tokens.size(),
                                                   " tokens, more than a header counts (", kMaxId,
                                                   ")"));
  }
  const auto largest = std::max_element(tokens.begin(), tokens.end());
  const uint32_t max_id = largest == tokens.end() ? 0 : *largest;
  if (width == TokenWidth::kAuto) width = max_id < 65536 ? TokenWidth::kU16 : TokenWidth::kU32;
  const uint32_t limit = width == TokenWidth::kU16 ? 65535 : uint32_t(kMaxId);
  if (max_id > limit) {
    const size_t i = size_t(
        std::find_if(tokens.begin(), tokens.end(), [limit](uint32_t id) { return id > limit; }) -
        tokens.begin());
    return absl::InvalidArgumentError(absl::StrCat(
        "token file '", path, "': id ", tokens[i], " at position ", i, " does not fit ",
        width == TokenWidth::kU16 ? "a uint16 token file (ids up to 65535; write uint32)"
                                  : "a token file (ids up to INT32_MAX = 2147483647)"));
  }
  const FileKind& kind = width == TokenWidth::kU16 ? kU16File : kU32File;
  int32_t header[kHeaderInts] = {};
  header[0] = kind.magic;
  header[1] = kind.version;
  header[2] = int32_t(tokens.size());
  AtomicFileWriter writer;
  RETURN_IF_ERROR(writer.Open(path));
  RETURN_IF_ERROR(writer.Write(header, sizeof(header)));
  if (kind.width == 4) {
    RETURN_IF_ERROR(writer.Write(tokens.data(), tokens.size() * sizeof(uint32_t)));
  } else {
    const std::vector<uint16_t> narrow(tokens.begin(), tokens.end());  // every id < 65536
    RETURN_IF_ERROR(writer.Write(narrow.data(), narrow.size() * sizeof(uint16_t)));
  }
  return writer.Commit();
}

Status CheckTokensFit(const TokenData& data, int vocab_size) {
  if (data.max_token < vocab_size) return absl::OkStatus();
  for (size_t i = 0; i < data.tokens.size(); ++i) {
    if (int64_t(data.tokens[i]) >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("data '", data.source, "' holds token ", data.tokens[i], " at position ", i,
                       ", outside the model's vocabulary of ", vocab_size, " (largest token ",
                       data.max_token, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace longhaul::model
