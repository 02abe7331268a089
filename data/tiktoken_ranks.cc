// Reads and checks tiktoken rank files (see tiktoken_ranks.h).
#include "data/tiktoken_ranks.h"

#include <cstdint>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/file_io.h"

namespace longhaul::data {
namespace {

// Debian's abseil has its own string_view type.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

Status LineError(const std::string& source, size_t line, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": ", Absl(what)));
}

// A short, printable form of a field for messages.
std::string Quote(std::string_view field) {
  constexpr size_t kShown = 40;
  std::string shown = absl::CHexEscape(Absl(field.substr(0, kShown)));
  return absl::StrCat("'", shown, field.size() > kShown ? "...'" : "'");
}

}  // namespace

StatusOr<TiktokenRanks> ParseTiktokenRanks(std::string_view contents, const std::string& source) {
  TiktokenRanks ranks;
  ranks.source = source;
  std::vector<size_t> line_of_rank;
  size_t line = 0;
  size_t pos = 0;
  while (pos < contents.size()) {
    ++line;
    size_t end = contents.find('\n', pos);
    if (end == std::string_view::npos) end = contents.size();
    const std::string_view text = contents.substr(pos, end - pos);
    pos = end + 1;
    if (text.empty()) continue;
    if (text.size() > kMaxRankLineBytes) {
      return LineError(source, line,
                       absl::StrCat("line is ", text.size(), " bytes, more than the limit of ",
                                    kMaxRankLineBytes));
    }
    const size_t space = text.find(' ');
    if (space == std::string_view::npos || text.find(' ', space + 1) != std::string_view::npos) {
      return LineError(source, line,
                       absl::StrCat("expected '<base64 token> <rank>', found ", Quote(text)));
    }
    const std::string_view b64 = text.substr(0, space);
    const std::string_view rank_text = text.substr(space + 1);

    std::string token;
    if (!absl::Base64Unescape(Absl(b64), &token) || absl::Base64Escape(token) != b64) {
      return LineError(source, line, absl::StrCat("malformed base64 token ", Quote(b64)));
    }
    if (token.empty()) return LineError(source, line, "empty token");

    if (rank_text.empty() || rank_text.size() > 10 ||
        rank_text.find_first_not_of("0123456789") != std::string_view::npos) {
      return LineError(source, line, absl::StrCat("rank ", Quote(rank_text), " is not a number"));
    }
    uint64_t rank = 0;
    for (char c : rank_text) rank = rank * 10 + uint64_t(c - '0');
    const size_t expected = ranks.tokens.size();
    if (rank < expected) {
      return LineError(
          source, line,
          absl::StrCat("duplicate rank ", rank, " (first on line ", line_of_rank[rank], ")"));
    }
    if (rank > expected) {
      return LineError(
          source, line,
          absl::StrCat("rank ", rank, " where ", expected,
                       " was expected: ranks must be 0, 1, 2, ... in order, with "
                       "no gaps (missing ",
                       expected, rank - 1 > expected ? absl::StrCat("..", rank - 1) : std::string(),
                       ")"));
    }
    if (rank >= kMaxRanks) {
      return LineError(source, line, absl::StrCat("more than the limit of ", kMaxRanks, " ranks"));
    }
    const auto [it, inserted] = ranks.rank_of.emplace(token, TokenId(rank));
    if (!inserted) {
      return LineError(source, line,
                       absl::StrCat("duplicate token ", Quote(b64), " (rank ", it->second,
                                    " on line ", line_of_rank[it->second], ")"));
    }
    ranks.tokens.push_back(std::move(token));
    line_of_rank.push_back(line);
  }
  if (ranks.tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no ranks in the file"));
  }
  for (int b = 0; b < 256; ++b) {
    if (!ranks.rank_of.contains(std::string(1, char(b)))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: byte 0x%02X has no rank: byte-level BPE needs each of the 256 "
                          "single bytes as a token",
                          source, b));
    }
  }
  return ranks;
}

StatusOr<TiktokenRanks> LoadTiktokenRanks(const std::string& path) {
  ASSIGN_OR_RETURN(const int64_t size, model::FileSize(path, "tiktoken rank file"));
  if (uint64_t(size) > kMaxRankFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": rank file is ", size, " bytes, more than the limit of ", kMaxRankFileBytes));
  }
  std::string contents(size_t(size), '\0');
  RETURN_IF_ERROR(
      model::ReadFileRange(path, "tiktoken rank file", 0, contents.data(), contents.size()));
  return ParseTiktokenRanks(contents, path);
}

}  // namespace longhaul::data
