// Tokenizer: the one seam between text and token ids. Two implementations: byte-level BPE
// over tiktoken rank files (tiktoken_tokenizer.h: GPT-2 / r50k_base, cl100k_base) and over
// Hugging Face tokenizer.json files (hf_tokenizer.h: the GPT-2 and Llama 3 forms); data
// preparation and evaluation never know which kind of vocabulary they hold.
//
// Contract shared by every implementation:
//   - Decode(Encode(text)) == text for valid UTF-8 text (the pre-tokenizers used here cover
//     every character; invalid UTF-8 is replaced or refused, see InvalidUtf8).
//   - Special tokens ("<|endoftext|>", ...) are recognised in text only when the caller asks
//     (EncodeOptions); by default their strings are ordinary text, as in tiktoken's
//     encode_ordinary, so untrusted documents cannot inject an end-of-text.
//   - Every method is const and safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace longhaul::data {

using TokenId = uint32_t;

// What Encode does with bytes that are not valid UTF-8.
enum class InvalidUtf8 {
  // Each maximal invalid subsequence becomes U+FFFD (the WHATWG decoder's rule, which is
  // what Node's Buffer.toString('utf8') and TextDecoder do before js-tiktoken sees the text,
  // and Python tiktoken's encode does with lone surrogates). Decode then gives back
  // the replaced text, not the original bytes.
  kReplace,
  // InvalidArgument naming the byte offset of the first invalid sequence.
  kReject,
};

struct EncodeOptions {
  // Special tokens to recognise in the text, by their exact strings; each occurrence is
  // encoded as that token's id. Strings that are not special tokens of the vocabulary are an
  // error. Special tokens not listed here are ordinary text (see reject_disallowed_special).
  std::vector<std::string> allowed_special;
  // Recognise every special token of the vocabulary (tiktoken's allowed_special="all").
  bool allow_all_special = false;
  // When true, a special token's string that is not allowed is InvalidArgument naming the
  // token and its byte offset: tiktoken's encode() default (disallowed_special="all"), for
  // callers that prefer refusing such text over encoding it as ordinary text.
  bool reject_disallowed_special = false;
  InvalidUtf8 invalid_utf8 = InvalidUtf8::kReplace;
};

struct SpecialToken {
  std::string text;  // e.g. "<|endoftext|>"
  TokenId id;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to `*ids`. On error `*ids` is left as it was.
  virtual Status EncodeTo(std::string_view text, const EncodeOptions& options,
                          std::vector<TokenId>* ids) const = 0;

  StatusOr<std::vector<TokenId>> Encode(std::string_view text,
                                        const EncodeOptions& options = {}) const {
    std::vector<TokenId> ids;
    RETURN_IF_ERROR(EncodeTo(text, options, &ids));
    return ids;
  }

  // The bytes of `ids`, concatenated. Not necessarily valid UTF-8 (a character may be split
  // across tokens). An id that names no token is InvalidArgument naming it and its index.
  virtual StatusOr<std::string> Decode(std::span<const TokenId> ids) const = 0;

  // One more than the largest id, special tokens included. Some ids below it may name no
  // token (cl100k_base has none at 100256).
  virtual uint32_t vocab_size() const = 0;

  // The end-of-text token ("<|endoftext|>"), which separates documents in training data;
  // nullopt when the vocabulary has none.
  virtual std::optional<TokenId> eot_id() const = 0;

  // Every special token with its id, in id order.
  virtual std::span<const SpecialToken> special_tokens() const = 0;

  // What this is, for messages: "gpt2", "cl100k_base", a file path, ...
  virtual const std::string& name() const = 0;
};

}  // namespace longhaul::data
