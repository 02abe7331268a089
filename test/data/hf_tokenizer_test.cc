// The tokenizer.json tokenizer's rules on a toy file (test/data/toy_hf_json.h), in both
// pre-tokenizer forms: Hugging Face's merge rule (pairs, not concatenations), ignore_merges,
// added tokens (special ones only when allowed, the others always, leftmost-longest), Split
// steps that keep the text between matches, the BOS and EOT rules, decoding, the byte-level
// alphabet, and the same ids from several threads and with the piece cache off. Malformed
// files are hf_tokenizer_json_test's; agreement with Hugging Face's own implementation on real
// vocabularies is hf_js_agreement_test's.
#include "data/hf_tokenizer.h"

#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "data/byte_level.h"
#include "data/encode_input.h"
#include "test/data/toy_hf_json.h"

namespace longhaul::data {
namespace {

using testing::ToyHfJson;

std::unique_ptr<HfTokenizer> Toy(bool llama3, HfOptions options = {}) {
  auto t = HfTokenizer::Parse(ToyHfJson(llama3).dump(), "toy.json", options);
  INFO(t.status());
  REQUIRE(t.ok());
  return std::move(t).value();
}

std::vector<TokenId> Ids(const Tokenizer& t, std::string_view text, EncodeOptions o = {}) {
  auto ids = t.Encode(text, o);
  INFO(ids.status());
  REQUIRE(ids.ok());
  return *ids;
}

std::string Text(const Tokenizer& t, const std::vector<TokenId>& ids) {
  auto text = t.Decode(ids);
  INFO(text.status());
  REQUIRE(text.ok());
  return *text;
}

TEST_CASE("the byte-level alphabet") {
  CHECK(ByteLevelEncode(" ") == "\xC4\xA0");   // U+0120
  CHECK(ByteLevelEncode("\n") == "\xC4\x8A");  // U+010A
  CHECK(ByteLevelEncode("a!~") == "a!~");
  CHECK(ByteLevelChar(0xAD) == 0x143);  // the last byte that does not stand for itself
  CHECK(ByteLevelChar(0xFF) == 0xFF);
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  std::string back;
  REQUIRE(ByteLevelDecode(ByteLevelEncode(all), &back));
  CHECK(back == all);
  for (const char* bad :
       {" ", "a b", "\xC5\x84" /* U+0144 */, "\xE4\xB8\xAD", "\xC4", "\xC0\xA1", "\x80"}) {
    std::string bytes;
    CHECK_FALSE(ByteLevelDecode(bad, &bytes));
  }
}

TEST_CASE("GPT-2's form: merges by pair, every piece merged") {
  auto t = Toy(/*llama3=*/false);
  CHECK(t->name() == "toy.json");
  CHECK(t->vocab_size() == 305);
  CHECK(t->merge_count() == testing::ToyHfMerges().size());
  CHECK(t->pre_tokenizer_patterns() == std::vector<std::string>{Gpt2Encoding().pattern});
  CHECK(Ids(*t, "") == std::vector<TokenId>{});
  CHECK(Ids(*t, "hello world") == std::vector<TokenId>{259, 264});
  CHECK(Ids(*t, "aaaaa") == std::vector<TokenId>{266, 'a'});
  CHECK(Ids(*t, "abc") == std::vector<TokenId>{268});  // b c, then a bc
  // (y, z) ranks before (x, y), and (x, yz) is no merge, though "xyz" is a token.
  CHECK(Ids(*t, "xyz") == std::vector<TokenId>{'x', 269});
  // (q, r) first, then (p, qr): the second pair that makes "pqr".
  CHECK(Ids(*t, "pqr") == std::vector<TokenId>{274});
  CHECK(Ids(*t, "pq") == std::vector<TokenId>{273});
  // "ab" is a token, but no merge makes it.
  CHECK(Ids(*t, "ab") == std::vector<TokenId>{'a', 'b'});
  CHECK(t->bos_id() == std::nullopt);
  CHECK(t->eot_id() == 300u);
  for (const char* s : {"hello world", "xyz pqr ab", "  \n\t x", "caf\xC3\xA9 \xF0\x9F\x98\x80"}) {
    CHECK(Text(*t, Ids(*t, s)) == s);
  }
}

TEST_CASE("Llama 3's form: Split then ByteLevel, ignore_merges, a BOS") {
  auto t = Toy(/*llama3=*/true);
  CHECK(t->pre_tokenizer_patterns() == std::vector<std::string>{Cl100kBaseEncoding().pattern});
  CHECK(Ids(*t, "hello world") == std::vector<TokenId>{259, 264});
  CHECK(Ids(*t, "xyz") == std::vector<TokenId>{271});  // a token, taken whole
  CHECK(Ids(*t, "ab") == std::vector<TokenId>{275});
  CHECK(Ids(*t, "xyzab") == std::vector<TokenId>{'x', 269, 'a', 'b'});  // not a token: merged
  CHECK(t->bos_id() == 304u);
  // Encode adds no BOS unless asked.
  CHECK(Ids(*t, "ab") == std::vector<TokenId>{275});
  HfOptions with_bos;
  with_bos.add_bos = true;
  auto b = Toy(true, with_bos);
  CHECK(Ids(*b, "ab") == std::vector<TokenId>{304, 275});
  CHECK(Ids(*b, "") == std::vector<TokenId>{304});
  // GPT-2's form has no BOS to add.
  auto r = HfTokenizer::Parse(ToyHfJson(false).dump(), "toy.json", with_bos);
  REQUIRE(!r.ok());
  CHECK(r.status().message() ==
        "toy.json: HfOptions::add_bos, but the file's post_processor puts no BOS first");
}

TEST_CASE("special added tokens only when allowed; the others always") {
  for (bool llama3 : {false, true}) {
    auto t = Toy(llama3);
    std::vector<SpecialToken> specials(t->special_tokens().begin(), t->special_tokens().end());
    REQUIRE(specials.size() == 3);
    CHECK(specials[0].text == "<|endoftext|>");
    CHECK(specials[2].id == 304u);
    REQUIRE(t->added_tokens().size() == 2);
    CHECK(t->added_tokens()[0].text == "<sep>");

    const std::string text = "a<|endoftext|>b<sep>c<sep>!";
    const std::vector<TokenId> plain = Ids(*t, text);
    CHECK(std::find(plain.begin(), plain.end(), 300u) == plain.end());
    // <sep> and the longer <sep>! are recognised without being allowed.
    REQUIRE(plain.size() >= 4);
    CHECK(plain[plain.size() - 1] == 303u);
    CHECK(std::count(plain.begin(), plain.end(), 302u) == 1);
    CHECK(Text(*t, plain) == text);

    EncodeOptions all;
    all.allow_all_special = true;
    CHECK(Ids(*t, text, all) == std::vector<TokenId>{'a', 300, 'b', 302, 'c', 303});
    EncodeOptions pad;
    pad.allowed_special = {"<|pad|>"};
    CHECK(Ids(*t, "<|pad|><|endoftext|>", pad)[0] == 301u);
    EncodeOptions unknown;
    unknown.allowed_special = {"<sep>"};  // an added token, but not a special one
    auto r = t->Encode("x", unknown);
    REQUIRE(!r.ok());
    CHECK(r.status().message() ==
          "toy.json: allowed special token '<sep>' is not a special token of this encoding");
    EncodeOptions strict;
    strict.reject_disallowed_special = true;
    r = t->Encode("ok<sep> <|pad|>", strict);
    REQUIRE(!r.ok());
    CHECK(r.status().message() ==
          "toy.json: text holds the special token <|pad|> at byte offset 8, which is not allowed "
          "(EncodeOptions::allowed_special)");
    CHECK(t->Encode("ok<sep>", strict).ok());
  }
}

TEST_CASE("the special-token splitter takes the leftmost, then the longest") {
  SpecialTokenSplitter s({{"<a>", 1}, {"<a><b>", 2}, {"b>", 3}}, {{"<", 4}});
  auto split = [&](std::string_view text, bool all) {
    std::vector<std::string> parts;
    EncodeOptions o;
    o.allow_all_special = all;
    REQUIRE(s.Split(
                 text, o,
                 [&](std::string_view p) {
                   parts.emplace_back(p);
                   return absl::OkStatus();
                 },
                 [&](TokenId id) { parts.push_back("#" + std::to_string(id)); })
                .ok());
    return parts;
  };
  CHECK(split("x<a><b>y", true) == std::vector<std::string>{"x", "#2", "y"});
  CHECK(split("x<a><b", true) == std::vector<std::string>{"x", "#1", "#4", "b"});
  CHECK(split("x<a><b>y", false) == std::vector<std::string>{"x", "#4", "a>", "#4", "b>y"});
  CHECK(split("", true).empty());
}

TEST_CASE("a Split step keeps the text between matches; String patterns are literal") {
  // RegexSplitter's kKeep: the stretches between matches are pieces; empty matches cut them,
  // as in Hugging Face's Split (JavaScript's matchAll gives a, b, x, c too).
  auto splitter = RegexSplitter::Create("x*").value();
  std::vector<std::string> pieces;
  REQUIRE(splitter
              ->Split(
                  "abxc", [&](std::string_view p) { pieces.emplace_back(p); },
                  RegexSplitter::Unmatched::kKeep)
              .ok());
  CHECK(pieces == std::vector<std::string>{"a", "b", "x", "c"});
  pieces.clear();
  REQUIRE(splitter->Split("abxc", [&](std::string_view p) { pieces.emplace_back(p); }).ok());
  CHECK(pieces == std::vector<std::string>{"x"});

  nlohmann::json j = ToyHfJson(true);
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "\\d+"}};
  auto t = HfTokenizer::Parse(j.dump(), "digits.json").value();
  CHECK(Ids(*t, "ab12abc") == std::vector<TokenId>{275, '1', '2', 268});  // ab, 12, abc
  CHECK(Ids(*t, "abab") == std::vector<TokenId>{'a', 'b', 'a', 'b'});     // one piece, merged
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"String", "b."}};
  t = HfTokenizer::Parse(j.dump(), "literal.json").value();
  CHECK(t->pre_tokenizer_patterns() == std::vector<std::string>{"b\\."});
  CHECK(Ids(*t, "abcab.") == std::vector<TokenId>{268, 'a', 'b', '.'});  // "abca", "b."
  // Two Split steps, the second splitting the first's pieces.
  nlohmann::json two = ToyHfJson(true);
  auto& steps = two["pre_tokenizer"]["pretokenizers"];
  const nlohmann::json dash = {{"type", "Split"},
                               {"pattern", {{"String", "-"}}},
                               {"behavior", "Isolated"},
                               {"invert", false}};
  steps.insert(steps.begin(), dash);
  t = HfTokenizer::Parse(two.dump(), "two.json").value();
  CHECK(Ids(*t, "ab-ab") == std::vector<TokenId>{275, '-', 275});
}

TEST_CASE("the end-of-text token: the option's, else a known name") {
  CHECK(Toy(true)->eot_id() == 300u);
  HfOptions pad;
  pad.eot_token = "<|pad|>";
  CHECK(Toy(true, pad)->eot_id() == 301u);
  nlohmann::json j = ToyHfJson(true);
  j["added_tokens"][0]["content"] = "<|end_of_text|>";
  CHECK(HfTokenizer::Parse(j.dump(), "llama.json").value()->eot_id() == 300u);
  j["added_tokens"][0]["content"] = "<|eot|>";
  CHECK(HfTokenizer::Parse(j.dump(), "none.json").value()->eot_id() == std::nullopt);
  HfOptions missing;
  missing.eot_token = "<|nope|>";
  auto r = HfTokenizer::Parse(ToyHfJson(true).dump(), "toy.json", missing);
  REQUIRE(!r.ok());
  CHECK(r.status().message() ==
        "toy.json: HfOptions::eot_token '<|nope|>' is not an added token of the file");
}

TEST_CASE("decoding: token bytes, added tokens as written, unknown ids named") {
  auto t = Toy(false);
  CHECK(Text(*t, {259, 300, 264, 303}) == "hello<|endoftext|> world<sep>!");
  CHECK(Text(*t, {0xC3}) == "\xC3");  // half a character comes back as it is
  for (TokenId id : {276u, 299u, 305u, 1000000u}) {
    auto r = t->Decode(std::vector<TokenId>{'a', id});
    REQUIRE(!r.ok());
    CHECK(r.status().message() ==
          "toy.json: id " + std::to_string(id) + " at index 1 is no token (vocabulary size 305)");
  }
}

TEST_CASE("invalid UTF-8 is replaced, or refused when asked") {
  auto t = Toy(true);
  CHECK(Ids(*t, "ab\xFF") == Ids(*t, "ab\xEF\xBF\xBD"));
  EncodeOptions reject;
  reject.invalid_utf8 = InvalidUtf8::kReject;
  std::vector<TokenId> ids = {7};
  const Status s = t->EncodeTo("ab\xFF", reject, &ids);
  CHECK(s.message() ==
        "toy.json: text is not valid UTF-8: invalid sequence at byte offset 2 ('\\xff...')");
  CHECK(ids == std::vector<TokenId>{7});
}

TEST_CASE("megabyte runs in bounded time, and the same ids from threads and without a cache") {
  for (bool llama3 : {false, true}) {
    auto t = Toy(llama3);
    HfOptions no_cache;
    no_cache.piece_cache_entries = 0;
    auto uncached = Toy(llama3, no_cache);
    for (const std::string& run : {std::string(1 << 20, 'a'), std::string(1 << 20, ' ')}) {
      const std::vector<TokenId> ids = Ids(*t, run);
      CHECK(Text(*t, ids) == run);
      CHECK(Ids(*uncached, run) == ids);
    }
    std::string text;
    for (int i = 0; i < 2000; ++i) {
      text += "hello worlds xyzab pqr aaaaaaa <sep> " + std::to_string(i * 7919) + "\n";
    }
    const std::vector<TokenId> want = Ids(*uncached, text);
    CHECK(Ids(*t, text) == want);
    CHECK(Ids(*t, text) == want);  // now from the cache
    std::vector<std::vector<TokenId>> got(4);
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, i] { got[i] = t->Encode(text).value(); });
    }
    for (auto& th : threads) th.join();
    for (const auto& ids : got) CHECK(ids == want);
  }
}

}  // namespace
}  // namespace longhaul::data
