// tokenizer.json as hostile input (data/hf_tokenizer_json.h): a table of malformed and
// unsupported files, each refused with a message naming the file, the JSON path and what is
// wrong with it; then random damage to a good file (bytes flipped, cut short, values swapped
// for others at random places), which must give a tokenizer or an error, never a crash, and a
// tokenizer that works.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "data/hf_tokenizer.h"
#include "test/data/toy_hf_json.h"

namespace longhaul::data {
namespace {

using nlohmann::json;
using testing::ToyHfJson;

std::string ErrorOf(const std::string& text) {
  auto t = HfTokenizer::Parse(text, "tok.json");
  if (t.ok()) return "(no error)";
  CHECK(t.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(t.status().message());
}

struct Case {
  bool llama3;
  std::function<void(json&)> change;
  std::string error;
};

TEST_CASE("malformed and unsupported files are refused, naming where and what") {
  const std::vector<Case> cases = {
      // The top level.
      {false, [](json& j) { j = json::array(); },
       "tok.json: expected a JSON object at the top level, found an array"},
      {false,
       [](json& j) {
         j["truncation"] = {{"max_length", 512}};
       },
       "tok.json: truncation: {\"max_length\":512} is not supported (ids are never cut or padded "
       "here; null expected)"},
      {false,
       [](json& j) {
         j["normalizer"] = {{"type", "NFC"}};
       },
       "tok.json: normalizer: {\"type\":\"NFC\"} is not supported (only null: byte-level BPE on "
       "the text as it is)"},
      {false, [](json& j) { j.erase("model"); }, "tok.json: model: missing"},
      // The model.
      {false, [](json& j) { j["model"]["type"] = "WordPiece"; },
       "tok.json: model.type: \"WordPiece\" is not supported (byte-level BPE only)"},
      {false, [](json& j) { j["model"].erase("type"); }, "tok.json: model.type: missing"},
      {false, [](json& j) { j["model"]["byte_fallback"] = true; },
       "tok.json: model.byte_fallback: true is not supported (byte-level BPE has every byte as a "
       "token)"},
      {false, [](json& j) { j["model"]["byte_fallback"] = "no"; },
       "tok.json: model.byte_fallback: expected true or false, found the string \"no\""},
      {false, [](json& j) { j["model"]["dropout"] = 0.1; },
       "tok.json: model.dropout: 0.1 is not supported (dropout makes encoding random; null "
       "expected)"},
      {false, [](json& j) { j["model"]["end_of_word_suffix"] = "</w>"; },
       "tok.json: model.end_of_word_suffix: \"</w>\" is not supported (byte-level BPE has none)"},
      {false, [](json& j) { j["model"]["unk_token"] = "<unk>"; },
       "tok.json: model.unk_token: \"<unk>\" is not a token of model.vocab"},
      // The vocabulary.
      {false, [](json& j) { j["model"]["vocab"] = json::array(); },
       "tok.json: model.vocab: expected an object, found an array"},
      {false, [](json& j) { j["model"]["vocab"]["he"] = -1; },
       "tok.json: model.vocab[\"he\"]: expected a token id (0, 1, 2, ...), found the number -1"},
      {false, [](json& j) { j["model"]["vocab"]["he"] = 256.5; },
       "tok.json: model.vocab[\"he\"]: expected a token id (0, 1, 2, ...), found the number "
       "256.5"},
      {false, [](json& j) { j["model"]["vocab"]["he"] = 99999999999; },
       "tok.json: model.vocab[\"he\"]: id 99999999999 is beyond the limit of 4194304"},
      {false, [](json& j) { j["model"]["vocab"]["he"] = 4000000; },
       "tok.json: model.vocab: with added_tokens, defines 281 tokens with ids up to 4000000: "
       "3999720 unused ids, more than the limit of 65536"},
      {false, [](json& j) { j["model"]["vocab"]["he"] = 257; },
       "tok.json: model.vocab: tokens \"he\" and \"ll\" both have id 257"},
      {false, [](json& j) { j["model"]["vocab"]["a b"] = 280; },
       "tok.json: model.vocab[\"a b\"]: token 280 is not written in the byte-level alphabet, and "
       "is no added token"},
      {false, [](json& j) { j["model"]["vocab"][""] = 280; },
       "tok.json: model.vocab[\"\"]: empty token"},
      {false, [](json& j) { j["model"]["vocab"][std::string(3000, 'a')] = 280; },
       "tok.json: model.vocab[\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...]: "
       "token of 3000 bytes, more than the limit of 1024"},
      {false, [](json& j) { j["model"]["vocab"].erase("\xC4\x8A"); },
       "tok.json: model.vocab: no token for the byte 0x0A (\"\xC4\x8A\"): byte-level BPE needs "
       "one for each of the 256 bytes"},
      // The merges.
      {false, [](json& j) { j["model"].erase("merges"); }, "tok.json: model.merges: missing"},
      {false, [](json& j) { j["model"]["merges"][0] = "h q9"; },
       "tok.json: model.merges[0]: \"h q9\": \"q9\" is not a token of model.vocab"},
      {false, [](json& j) { j["model"]["merges"][3] = "c d"; },
       "tok.json: model.merges[3]: \"c d\" makes \"cd\", which is not a token of model.vocab"},
      {false, [](json& j) { j["model"]["merges"][0] = "he"; },
       "tok.json: model.merges[0]: expected \"left right\" (two tokens and one space), found "
       "\"he\""},
      {false, [](json& j) { j["model"]["merges"][0] = "h  e"; },
       "tok.json: model.merges[0]: expected \"left right\" (two tokens and one space), found "
       "\"h  e\""},
      {true, [](json& j) { j["model"]["merges"][0] = {"h"}; },
       "tok.json: model.merges[0]: expected [left, right] or \"left right\", found an array"},
      {true,
       [](json& j) {
         j["model"]["merges"][0] = {1, 2};
       },
       "tok.json: model.merges[0]: expected [left, right] or \"left right\", found an array"},
      {false, [](json& j) { j["model"]["merges"][5] = "h e"; },
       "tok.json: model.merges[5]: \"h e\" repeats model.merges[0]"},
      // Added tokens.
      {false, [](json& j) { j["added_tokens"][1]["lstrip"] = true; },
       "tok.json: added_tokens[1] (\"<|pad|>\").lstrip: true is not supported (only added tokens "
       "matched exactly as written)"},
      {false, [](json& j) { j["added_tokens"][3]["single_word"] = true; },
       "tok.json: added_tokens[3] (\"<sep>!\").single_word: true is not supported (only added "
       "tokens matched exactly as written)"},
      {false, [](json& j) { j["added_tokens"][1]["id"] = 300; },
       "tok.json: added_tokens[1] (\"<|pad|>\"): id 300 is added_tokens[0]'s too"},
      {false, [](json& j) { j["added_tokens"][1]["content"] = "<|endoftext|>"; },
       "tok.json: added_tokens[1] (\"<|endoftext|>\"): repeats added_tokens[0]"},
      {false, [](json& j) { j["added_tokens"][1]["id"] = 256; },
       "tok.json: added_tokens[1] (\"<|pad|>\"): id 256 is model.vocab's token \"he\", not this "
       "one"},
      {false, [](json& j) { j["added_tokens"][1]["content"] = "he"; },
       "tok.json: added_tokens[1] (\"he\"): is model.vocab's token 256, but has id 301 here"},
      {false,
       [](json& j) {
         j["added_tokens"][1]["content"] = "\xC4\xA0w";  // "Ġw": the token for " w"
         j["added_tokens"][1]["id"] = 260;
       },
       "tok.json: added_tokens[1] (\"\xC4\xA0w\"): is also model.vocab's token 260, which stands "
       "for other bytes in the byte-level alphabet: an added token in the vocabulary must stand "
       "for its own text"},
      {false, [](json& j) { j["added_tokens"][2]["content"] = ""; },
       "tok.json: added_tokens[2].content: empty token"},
      {false, [](json& j) { j["added_tokens"][2].erase("id"); },
       "tok.json: added_tokens[2].id: missing"},
      // The pre-tokenizer.
      {false, [](json& j) { j["pre_tokenizer"] = nullptr; },
       "tok.json: pre_tokenizer: missing or null; byte-level BPE needs a ByteLevel one"},
      {false, [](json& j) { j["pre_tokenizer"]["add_prefix_space"] = true; },
       "tok.json: pre_tokenizer.add_prefix_space: true is not supported (it puts a space before "
       "the text, which decoding would not take away)"},
      {false, [](json& j) { j["pre_tokenizer"]["type"] = "Whitespace"; },
       "tok.json: pre_tokenizer.type: \"Whitespace\" is not supported (byte-level BPE only)"},
      {true,
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0] = {{"type", "Metaspace"}, {"replacement", "_"}};
       },
       "tok.json: pre_tokenizer.pretokenizers[0].type: \"Metaspace\" is not supported "
       "(byte-level BPE only)"},
      {true, [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       "tok.json: pre_tokenizer.pretokenizers[0].behavior: \"Removed\" is not supported (only "
       "Isolated)"},
      {true, [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true; },
       "tok.json: pre_tokenizer.pretokenizers[0].invert: true is not supported (only false)"},
      {true,
       [](json& j) {
         j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(a"}};
       },
       "tok.json: pre_tokenizer.pretokenizers[0].pattern.Regex: pre-tokenizer pattern does not "
       "compile at offset 2: missing closing parenthesis (pattern: (a)"},
      {true, [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = "\\s+"; },
       "tok.json: pre_tokenizer.pretokenizers[0].pattern: expected {\"Regex\": ...} or "
       "{\"String\": ...}, found the string \"\\\\s+\""},
      {true, [](json& j) { j["pre_tokenizer"]["pretokenizers"].erase(1); },
       "tok.json: pre_tokenizer.pretokenizers: no ByteLevel step (byte-level BPE needs one, "
       "last)"},
      {true,
       [](json& j) {
         auto& steps = j["pre_tokenizer"]["pretokenizers"];
         std::swap(steps[0], steps[1]);
       },
       "tok.json: pre_tokenizer.pretokenizers[0]: ByteLevel before other steps is not supported "
       "(it must be the last)"},
      // The post-processor and the decoder.
      {false,
       [](json& j) {
         j["post_processor"] = {{"type", "BertProcessing"}};
       },
       "tok.json: post_processor.type: \"BertProcessing\" is not supported (only ByteLevel, "
       "TemplateProcessing and Sequence)"},
      {true,
       [](json& j) {
         auto& single = j["post_processor"]["processors"][1]["single"];
         std::swap(single[0], single[1]);
       },
       "tok.json: post_processor.processors[1].single: [{\"Sequence\":{\"id\":\"A\",\"type_id\":"
       "0}},{\"SpecialToken\":{\"id\":\"... is not supported (only [A], or [SpecialToken, A] "
       "for a BOS)"},
      {true,
       [](json& j) {
         j["post_processor"]["processors"][1]["special_tokens"]["<|begin_of_text|>"]["ids"] = {301};
       },
       "tok.json: post_processor.processors[1].special_tokens[\"<|begin_of_text|>\"].ids[0]: id "
       "301 is not the token \"<|begin_of_text|>\""},
      {true,
       [](json& j) { j["post_processor"]["processors"][1]["special_tokens"] = json::object(); },
       "tok.json: post_processor.processors[1].special_tokens[\"<|begin_of_text|>\"]: missing"},
      {false,
       [](json& j) {
         j["decoder"] = {{"type", "Metaspace"}};
       },
       "tok.json: decoder.type: \"Metaspace\" is not supported (byte-level BPE needs the "
       "ByteLevel decoder)"},
      {false, [](json& j) { j["decoder"] = nullptr; },
       "tok.json: decoder: missing or null; byte-level BPE needs the ByteLevel decoder"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    json j = ToyHfJson(cases[i].llama3);
    cases[i].change(j);
    INFO("case " << i);
    CHECK(ErrorOf(j.dump()) == cases[i].error);
  }
}

TEST_CASE("files that are not JSON, nest too deep or repeat a key, are refused") {
  CHECK(ErrorOf("{") ==
        "tok.json is not valid JSON (byte 2 of 1): [json.exception.parse_error.101] parse error "
        "at line 1, column 2: syntax error while parsing object key - unexpected end of input; "
        "expected string literal");
  CHECK(ErrorOf(std::string(100000, '[')) == "tok.json nests deeper than 64 levels (byte 64)");
  // nlohmann keeps the last of two equal keys, which would quietly drop a token.
  std::string text = ToyHfJson(false).dump();
  const std::string aa = "\"aa\":265";
  REQUIRE(text.find(aa) != std::string::npos);
  text.replace(text.find(aa), aa.size(), aa + ",\"aa\":266");
  CHECK(ErrorOf(text) == "tok.json has key 'aa' twice in one object");
  auto r = HfTokenizer::Load("/nonexistent/tokenizer.json");
  REQUIRE(!r.ok());
  CHECK(std::string(r.status().message()).find("/nonexistent/tokenizer.json") != std::string::npos);
}

// Encodes a little text with every option and decodes it back: a tokenizer that loaded must
// work, whatever the file held.
void Exercise(const HfTokenizer& t) {
  EncodeOptions all;
  all.allow_all_special = true;
  for (const EncodeOptions& o : {EncodeOptions(), all}) {
    for (const std::string text : {"hello world xyzab 123 <sep>! <|endoftext|>",
                                   "\xF0\x9F\x98\x80 "
                                   "caf\xC3\xA9"}) {
      auto ids = t.Encode(text, o);
      if (!ids.ok()) continue;  // a broken pre-tokenizer pattern may give up on a text
      for (TokenId id : *ids) REQUIRE(id < t.vocab_size());
      REQUIRE(t.Decode(*ids).ok());
    }
  }
}

TEST_CASE("random damage: an error or a working tokenizer, never a crash") {
  std::mt19937_64 rng(41);
  const std::vector<json> replacements = {nullptr,
                                          -1,
                                          0,
                                          1,
                                          255,
                                          256,
                                          4194303,
                                          4194304,
                                          1e300,
                                          "",
                                          "a",
                                          "\xC4\xA0",
                                          json::array(),
                                          json::object(),
                                          true,
                                          {"a", "b"},
                                          {{"type", "BPE"}},
                                          {{"Regex", "("}}};
  // More rounds with LONGHAUL_FUZZ_RUNS (as test/fuzz's targets take), e.g. under --config=asan.
  const char* runs = std::getenv("LONGHAUL_FUZZ_RUNS");
  const long rounds = runs != nullptr ? std::atol(runs) : 3000;
  size_t loaded = 0, refused = 0;
  for (long round = 0; round < rounds; ++round) {
    const bool llama3 = rng() % 2 == 0;
    std::string text = ToyHfJson(llama3).dump();
    switch (rng() % 3) {
      case 0: {  // flip, drop or insert bytes
        for (int k = 0; k < 1 + int(rng() % 4); ++k) {
          const size_t at = rng() % text.size();
          switch (rng() % 3) {
            case 0:
              text[at] = char(rng());
              break;
            case 1:
              text.erase(at, 1 + rng() % 8);
              break;
            default:
              text.insert(at, 1, "{}[],:\"0\\"[rng() % 10]);
              break;
          }
        }
        break;
      }
      case 1:  // cut short
        text.resize(rng() % text.size());
        break;
      default: {  // a value somewhere replaced by another
        json j = ToyHfJson(llama3);
        const json flat = j.flatten();
        auto it = flat.begin();
        std::advance(it, rng() % flat.size());
        std::string pointer = it.key();
        // Sometimes a whole object or array above the leaf.
        for (int up = int(rng() % 3); up > 0 && pointer.rfind('/') > 0; --up) {
          pointer.resize(pointer.rfind('/'));
        }
        j[json::json_pointer(pointer)] = replacements[rng() % replacements.size()];
        text = j.dump();
        break;
      }
    }
    auto t = HfTokenizer::Parse(text, "damaged.json");
    if (t.ok()) {
      ++loaded;
      Exercise(**t);
    } else {
      ++refused;
      REQUIRE(t.status().code() == absl::StatusCode::kInvalidArgument);
      REQUIRE(std::string(t.status().message()).rfind("damaged.json", 0) == 0);
    }
  }
  INFO(loaded << " damaged files loaded, " << refused << " refused");
  CHECK(loaded > 0);
  CHECK(refused > 0);
}

}  // namespace
}  // namespace longhaul::data
