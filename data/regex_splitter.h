// The pre-tokenizer: splits text into the pieces that BPE then encodes separately, by the
// encoding's regular expression (tiktoken's patterns use \p{L}, \p{N}, \s and a lookahead),
// compiled by PCRE2 in UTF-8 mode with Unicode properties (UCP) and JIT-compiled where PCRE2
// supports it. Pieces are the successive non-overlapping matches, left to right, as in
// tiktoken and JavaScript's matchAll; an empty match yields nothing. Text that no match covers
// is skipped (tiktoken's findall; its patterns cover every character) or, with
// Unmatched::kKeep, is a piece of its own (Hugging Face's Split pre-tokenizer with behavior
// Isolated).
//
// Known differences from other engines, all in rare characters: PCRE2 10.42 knows Unicode
// 14 (letters and digits added since are neither \p{L} nor \p{N} here), and its \s in UCP
// mode is Unicode's White_Space plus U+180E (JavaScript's \s lacks U+0085 and has U+FEFF;
// Rust's, which tiktoken uses, is exactly White_Space).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/functional/function_ref.h"
#include "common/status.h"

struct pcre2_real_code_8;

namespace longhaul::data {

class RegexSplitter {
 public:
  enum class Unmatched { kSkip, kKeep };

  // Compiles `pattern`; an invalid one is InvalidArgument quoting PCRE2's message and offset.
  static StatusOr<std::unique_ptr<RegexSplitter>> Create(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Calls `piece` with each match in `text`, in order, and with kKeep also with each
  // non-empty stretch between matches (and before the first and after the last; an empty
  // match ends a stretch too). Safe from several threads at once. Fails only when PCRE2 gives
  // up (resource limits on pathological input), naming the byte offset.
  // REQUIRES: `text` is valid UTF-8 (it is not checked again).
  Status Split(std::string_view text, absl::FunctionRef<void(std::string_view)> piece,
               Unmatched unmatched = Unmatched::kSkip) const;

  const std::string& pattern() const { return pattern_; }
  bool jit() const { return jit_; }

 private:
  RegexSplitter(std::string pattern, pcre2_real_code_8* code, bool jit)
      : pattern_(std::move(pattern)), code_(code), jit_(jit) {}

  std::string pattern_;
  pcre2_real_code_8* code_;
  bool jit_;
};

}  // namespace longhaul::data
