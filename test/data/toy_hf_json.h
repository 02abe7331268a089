// A small Hugging Face tokenizer.json for tests that need no real vocabulary: the 256 single
// bytes (ids 0..255, in byte order, written in the byte-level alphabet) and a few merged tokens
// with their merges, added tokens, and either pre-tokenizer form (GPT-2's ByteLevel with its
// regex, or Llama 3's Sequence[Split, ByteLevel] with ignore_merges). Tests change parts of it
// as nlohmann::json values.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/byte_level.h"
#include "data/tiktoken_encodings.h"

namespace longhaul::data::testing {

// The merged tokens, ids from 256 on, and the merges that make them, in rank order. Worth
// knowing: "orld" is or + ld; "xyz" is made only from (xy, z), while (y, z) ranks first, so
// the piece "xyz" merges to [x, yz] unless ignore_merges takes it whole; "pqr" is made by two
// pairs, (pq, r) and (p, qr), and since (q, r) ranks before (p, q), the second does it; "ab" has
// no merge (a piece "ab" is that token only with ignore_merges).
inline const std::vector<std::string>& ToyHfTokens() {
  static const std::vector<std::string> tokens = {
      "he",   "ll", "llo", "hello", " w", "or",  "ld", "orld", " world", "aa",
      "aaaa", "bc", "abc", "yz",    "xy", "xyz", "qr", "pq",   "pqr",    "ab"};  // 256..275
  return tokens;
}
inline const std::vector<std::vector<std::string>>& ToyHfMerges() {
  static const std::vector<std::vector<std::string>> merges = {
      {"h", "e"},   {"l", "l"}, {"ll", "o"},  {"he", "llo"},  {" ", "w"},
      {"o", "r"},   {"l", "d"}, {"or", "ld"}, {" w", "orld"}, {"a", "a"},
      {"aa", "aa"}, {"b", "c"}, {"a", "bc"},  {"y", "z"},     {"x", "y"},
      {"xy", "z"},  {"q", "r"}, {"p", "q"},   {"pq", "r"},    {"p", "qr"}};
  return merges;
}

// Added tokens: 300 <|endoftext|>, 301 <|pad|>, 304 <|begin_of_text|> (special); 302 <sep>,
// 303 <sep>! (not special: recognised in any text).
inline nlohmann::json ToyAddedToken(unsigned id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", special}};
}

// llama3: Llama 3's form (Sequence[Split(cl100k's pattern), ByteLevel(use_regex false)],
// ignore_merges, merges as arrays, a TemplateProcessing BOS); otherwise GPT-2's (ByteLevel
// with its regex, merges as "a b" strings, a ByteLevel post-processor).
inline nlohmann::json ToyHfJson(bool llama3) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteLevelEncode(std::string(1, char(b)))] = b;
  for (size_t i = 0; i < ToyHfTokens().size(); ++i) {
    vocab[ByteLevelEncode(ToyHfTokens()[i])] = 256 + i;
  }
  json merges = json::array();
  for (const auto& m : ToyHfMerges()) {
    const std::string left = ByteLevelEncode(m[0]), right = ByteLevelEncode(m[1]);
    if (llama3) {
      merges.push_back({left, right});
    } else {
      merges.push_back(left + " " + right);
    }
  }
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens",
       {ToyAddedToken(300, "<|endoftext|>", true), ToyAddedToken(301, "<|pad|>", true),
        ToyAddedToken(302, "<sep>", false), ToyAddedToken(303, "<sep>!", false),
        ToyAddedToken(304, "<|begin_of_text|>", true)}},
      {"normalizer", nullptr},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", llama3},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", !llama3}};
  if (llama3) {
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"},
                             {"pattern", {{"Regex", Cl100kBaseEncoding().pattern}}},
                             {"behavior", "Isolated"},
                             {"invert", false}},
                            byte_level}}};
    const json bos = {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}};
    const json a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
    j["post_processor"] = {
        {"type", "Sequence"},
        {"processors",
         {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}},
          {{"type", "TemplateProcessing"},
           {"single", {bos, a}},
           {"pair", {bos, a, bos, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
           {"special_tokens",
            {{"<|begin_of_text|>",
              {{"id", "<|begin_of_text|>"},
               {"ids", {304}},
               {"tokens", {"<|begin_of_text|>"}}}}}}}}}};
  } else {
    j["pre_tokenizer"] = byte_level;
    j["post_processor"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", true},
                           {"trim_offsets", false},
                           {"use_regex", true}};
  }
  return j;
}

}  // namespace longhaul::data::testing
