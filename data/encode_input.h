// What the byte-level BPE tokenizers (tiktoken_tokenizer.h, hf_tokenizer.h) do to a text before
// their pre-tokenizer, in one place so that both follow tokenizer.h's contract the same way:
//   1. PrepareEncodeText: invalid UTF-8 is replaced by U+FFFD or refused (InvalidUtf8), and
//      text too long for one call is refused;
//   2. SpecialTokenSplitter: the text is cut at the special tokens that EncodeOptions allows
//      (and at tokens recognised in any text: Hugging Face's non-special added tokens), which
//      become their own ids; the stretches between them are ordinary text.
// EncodeWithSpecialTokens puts the two together into the whole of an EncodeTo.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/status.h"
#include "data/tokenizer.h"

namespace longhaul::data {

// The largest text one Encode call takes (piece offsets are 32-bit); longer text must be
// encoded in parts (at document boundaries, so that no piece is cut).
inline constexpr size_t kMaxEncodeBytes = (size_t{1} << 32) - 1;

// The text to encode: `text` itself when it is valid UTF-8; otherwise, with kReplace, a copy
// in `*storage` with U+FFFD in place of each invalid sequence, and with kReject
// InvalidArgument naming the byte offset of the first. InvalidArgument too when the text is
// longer than kMaxEncodeBytes. Messages do not name the tokenizer (callers prefix it).
StatusOr<std::string_view> PrepareEncodeText(std::string_view text, InvalidUtf8 invalid_utf8,
                                             std::string* storage);

class SpecialTokenSplitter {
 public:
  // `special`: the tokens EncodeOptions governs (recognised only when allowed), listed as the
  // tokenizer's special_tokens() lists them. `always`: tokens recognised in any text.
  // REQUIRES: every text is non-empty valid UTF-8, and no two texts are the same.
  explicit SpecialTokenSplitter(std::vector<SpecialToken> special,
                                std::vector<SpecialToken> always = {});

  // Cuts `text` at each token it recognises (allowed special tokens, and the `always` ones):
  // the leftmost occurrence first, and of those starting at one byte, the longest. Calls
  // `ordinary` with each non-empty stretch of text between tokens and `token` with each
  // token's id, in text order. Errors (not naming the tokenizer; callers prefix it): an
  // allowed_special string that is no special token; with reject_disallowed_special, the
  // text of a special token that is not allowed, named with its byte offset; and the first
  // error that `ordinary` returns.
  // REQUIRES: `text` is valid UTF-8 (then so is every stretch handed to `ordinary`).
  Status Split(std::string_view text, const EncodeOptions& options,
               absl::FunctionRef<Status(std::string_view)> ordinary,
               absl::FunctionRef<void(TokenId)> token) const;

  std::span<const SpecialToken> special() const {
    return std::span<const SpecialToken>(tokens_).first(n_special_);
  }

 private:
  // A byte trie of the tokens' texts; node 0 is the root.
  struct Node {
    int32_t token = -1;  // index into tokens_ of the text ending here, or -1
    std::vector<std::pair<unsigned char, uint32_t>> children;
  };
  // The leftmost, then longest, occurrence at or after `from` of a token i with active[i]:
  // (i, byte offset).
  std::optional<std::pair<size_t, size_t>> Find(std::string_view text, size_t from,
                                                const std::vector<bool>& active) const;
  uint32_t Child(uint32_t node, unsigned char byte) const;

  std::vector<SpecialToken> tokens_;  // special ones first, then the `always` ones
  size_t n_special_ = 0;
  std::vector<Node> nodes_;
  bool starts_[256] = {};  // which bytes begin some token
  int only_start_ = -1;    // the one byte that begins every token (-1: none, or several)
};

// The whole of a byte-level BPE tokenizer's EncodeTo, as tokenizer.h specifies it: `text`
// through PrepareEncodeText, then `first` when it has a value (a BOS), then the ids of the
// text as `splitter` cuts it, with `ordinary` appending the ids of each stretch between
// tokens to `*ids`. On error `*ids` is left as it was and the message is prefixed with `name`
// (the tokenizer's name()).
Status EncodeWithSpecialTokens(std::string_view text, const EncodeOptions& options,
                               const SpecialTokenSplitter& splitter, std::optional<TokenId> first,
                               const std::string& name,
                               absl::FunctionRef<Status(std::string_view)> ordinary,
                               std::vector<TokenId>* ids);

}  // namespace longhaul::data
