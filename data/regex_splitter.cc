// PCRE2 behind the pre-tokenizer (see regex_splitter.h).
#include "data/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace longhaul::data {
namespace {

std::string Pcre2Message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) {
    return absl::StrCat("PCRE2 error ", code);
  }
  return reinterpret_cast<const char*>(buffer);
}

// Owns what one Split call allocates from PCRE2.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~MatchState() {
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

// The JIT's stack when its default (32 KiB on the machine stack) is not enough.
constexpr size_t kJitStackBytes = size_t{64} << 20;

}  // namespace

StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &error_offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("pre-tokenizer pattern does not compile at offset ", error_offset, ": ",
                     Pcre2Message(error), " (pattern: ", pattern, ")"));
  }
  // Without JIT support (some platforms) PCRE2's interpreter matches the same way, slower.
  const bool jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return std::unique_ptr<RegexSplitter>(new RegexSplitter(pattern, code, jit));
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(code_); }

Status RegexSplitter::Split(std::string_view text, absl::FunctionRef<void(std::string_view)> piece,
                            Unmatched unmatched) const {
  const bool keep = unmatched == Unmatched::kKeep;
  size_t covered = 0;  // the end of the last piece handed out
  MatchState state;
  state.data = pcre2_match_data_create(1, nullptr);
  if (state.data == nullptr) return absl::ResourceExhaustedError("pcre2_match_data_create failed");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t offset = 0;
  while (offset < n) {
    int rc = jit_ ? pcre2_jit_match(code_, subject, n, offset, 0, state.data, state.context)
                  : pcre2_match(code_, subject, n, offset, PCRE2_NO_UTF_CHECK, state.data,
                                state.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && state.jit_stack == nullptr) {
      // Retry this match, and the rest of the call, with a large JIT stack.
      state.context = pcre2_match_context_create(nullptr);
      state.jit_stack = pcre2_jit_stack_create(size_t{32} << 10, kJitStackBytes, nullptr);
      if (state.context == nullptr || state.jit_stack == nullptr) {
        return absl::ResourceExhaustedError("cannot allocate PCRE2's JIT stack");
      }
      pcre2_jit_stack_assign(state.context, nullptr, state.jit_stack);
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::ResourceExhaustedError(absl::StrCat("pre-tokenizer regex failed at byte offset ",
                                                       offset, ": ", Pcre2Message(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      if (keep && begin > covered) piece(text.substr(covered, begin - covered));
      piece(text.substr(begin, end - begin));
      offset = covered = end;
    } else {
      // An empty match ends the unmatched stretch before it (as in Hugging Face's Split), and
      // is stepped over by one character (UTF-8: skip continuation bytes).
      if (keep && begin > covered) {
        piece(text.substr(covered, begin - covered));
        covered = begin;
      }
      offset = begin + 1;
      while (offset < n && (static_cast<unsigned char>(text[offset]) & 0xC0) == 0x80) ++offset;
    }
  }
  if (keep && covered < n) piece(text.substr(covered));
  return absl::OkStatus();
}

}  // namespace longhaul::data
