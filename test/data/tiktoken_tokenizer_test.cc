// The tiktoken tokenizer's own rules on a toy vocabulary (data/tiktoken_tokenizer.h):
// special tokens only when asked, invalid UTF-8 replaced or refused, decode errors, bad
// encodings refused at creation, hostile input (megabyte runs) in bounded time, and the same
// ids from several threads and with the piece cache off. Agreement with tiktoken itself on
// the real vocabularies is tiktoken_js_agreement_test's job.
#include "data/tiktoken_tokenizer.h"

#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "test/data/toy_ranks.h"

namespace longhaul::data {
namespace {

using testing::ToyRanks;

// 256 bytes, then: he 256, ll 257, llo 258, hello 259, " w" 260, or 261, orld 262,
// " world" 263, "aa" 264, "aaaa" 265.
const std::vector<std::string> kMerged = {"he", "ll",   "llo",    "hello", " w",
                                          "or", "orld", " world", "aa",    "aaaa"};

TiktokenEncoding ToyEncoding() {
  TiktokenEncoding e = Gpt2Encoding();
  e.name = "toy";
  e.special_tokens = {{"<|endoftext|>", 300}, {"<|pad|>", 301}};
  e.expected_ranks = 256 + kMerged.size();
  return e;
}

std::unique_ptr<TiktokenTokenizer> Toy(TiktokenOptions options = {}) {
  auto t = TiktokenTokenizer::Create(ToyEncoding(), ToyRanks(kMerged), options);
  REQUIRE(t.ok());
  return std::move(t).value();
}

std::vector<TokenId> Ids(const Tokenizer& t, std::string_view text, EncodeOptions o = {}) {
  auto ids = t.Encode(text, o);
  REQUIRE(ids.ok());
  return *ids;
}

std::string Text(const Tokenizer& t, const std::vector<TokenId>& ids) {
  auto text = t.Decode(ids);
  REQUIRE(text.ok());
  return *text;
}

TEST_CASE("pieces that are tokens map directly; others are merged") {
  auto t = Toy();
  CHECK(t->vocab_size() == 302);
  CHECK(t->eot_id() == 300u);
  CHECK(t->name() == "toy");
  CHECK(Ids(*t, "") == std::vector<TokenId>{});
  CHECK(Ids(*t, "hello world") == std::vector<TokenId>{259, 263});
  // "hellos" is a piece but no token: h e l l o s -> he l l o s -> he ll o s -> he llo s
  // -> hello s.
  CHECK(Ids(*t, "hellos") == std::vector<TokenId>{259, 's'});
  // " worlds": " w" or l d s, and no merge reaches "orld" (neither "orl" nor "ld" is a token).
  CHECK(Ids(*t, " worlds") == std::vector<TokenId>{260, 261, 'l', 'd', 's'});
  for (const char* s : {"hello world", "hellos, worlds!", "  \n\t x", "caf\xC3\xA9"}) {
    CHECK(Text(*t, Ids(*t, s)) == s);
  }
}

TEST_CASE("special tokens are ordinary text unless allowed") {
  auto t = Toy();
  const std::string text = "a<|endoftext|>b<|pad|>";
  const std::vector<TokenId> plain = Ids(*t, text);
  CHECK(std::find(plain.begin(), plain.end(), 300u) == plain.end());
  CHECK(Text(*t, plain) == text);

  EncodeOptions eot;
  eot.allowed_special = {"<|endoftext|>"};
  const std::vector<TokenId> with_eot = Ids(*t, text, eot);
  REQUIRE(with_eot.size() >= 3);
  CHECK(with_eot[0] == 'a');
  CHECK(with_eot[1] == 300);
  CHECK(with_eot[2] == 'b');
  CHECK(std::find(with_eot.begin(), with_eot.end(), 301u) == with_eot.end());
  CHECK(Text(*t, with_eot) == text);

  EncodeOptions all;
  all.allow_all_special = true;
  CHECK(Ids(*t, text, all) == std::vector<TokenId>{'a', 300, 'b', 301});
  CHECK(Ids(*t, "<|pad|><|pad|>", all) == std::vector<TokenId>{301, 301});
  CHECK(Text(*t, {301, 'x', 300}) == "<|pad|>x<|endoftext|>");
}

TEST_CASE("special-token options that cannot be honoured are errors") {
  auto t = Toy();
  EncodeOptions unknown;
  unknown.allowed_special = {"<|nope|>"};
  auto r = t->Encode("x", unknown);
  REQUIRE(!r.ok());
  CHECK(r.status().message() ==
        "toy: allowed special token '<|nope|>' is not a special token of this encoding");

  EncodeOptions strict;
  strict.allowed_special = {"<|endoftext|>"};
  strict.reject_disallowed_special = true;
  CHECK(t->Encode("ok <|endoftext|>", strict).ok());
  r = t->Encode("xy<|pad|>", strict);
  REQUIRE(!r.ok());
  CHECK(r.status().message() ==
        "toy: text holds the special token <|pad|> at byte offset 2, which is not allowed "
        "(EncodeOptions::allowed_special)");
}

TEST_CASE("invalid UTF-8 is replaced by U+FFFD, or refused when asked") {
  auto t = Toy();
  const std::string bad = "ab\xFF\xC3z";
  const std::vector<TokenId> ids = Ids(*t, bad);
  CHECK(ids == Ids(*t, "ab\xEF\xBF\xBD\xEF\xBF\xBDz"));
  CHECK(Text(*t, ids) == "ab\xEF\xBF\xBD\xEF\xBF\xBDz");

  EncodeOptions reject;
  reject.invalid_utf8 = InvalidUtf8::kReject;
  auto r = t->Encode(bad, reject);
  REQUIRE(!r.ok());
  CHECK(r.status().message() ==
        "toy: text is not valid UTF-8: invalid sequence at byte offset 2 ('\\xff\\xc3z...')");
  CHECK(t->Encode("fine", reject).ok());
}

TEST_CASE("EncodeTo appends, and leaves the output alone on error") {
  auto t = Toy();
  std::vector<TokenId> ids = {7, 8};
  REQUIRE(t->EncodeTo("hello", {}, &ids).ok());
  CHECK(ids == std::vector<TokenId>{7, 8, 259});
  EncodeOptions reject;
  reject.invalid_utf8 = InvalidUtf8::kReject;
  CHECK(!t->EncodeTo("hello\x80", reject, &ids).ok());
  CHECK(ids == std::vector<TokenId>{7, 8, 259});
}

TEST_CASE("decoding an id that is no token names it") {
  auto t = Toy();
  for (TokenId id : {266u, 299u, 302u, 1000000u}) {
    auto r = t->Decode(std::vector<TokenId>{'a', id});
    REQUIRE(!r.ok());
    CHECK(r.status().message() ==
          "toy: id " + std::to_string(id) + " at index 1 is no token (vocabulary size 302)");
  }
  // Bytes of a split character come back as they are (not valid UTF-8 on their own).
  CHECK(Text(*t, {0xC3}) == "\xC3");
}

TEST_CASE("encodings that do not fit their ranks are refused") {
  TiktokenEncoding e = ToyEncoding();
  e.expected_ranks = 50256;
  auto r = TiktokenTokenizer::Create(e, ToyRanks(kMerged));
  REQUIRE(!r.ok());
  CHECK(r.status().message() == "toy.tiktoken: holds 266 ranks, but encoding toy has 50256");

  e = ToyEncoding();
  e.special_tokens.push_back({"<|clash|>", 259});
  r = TiktokenTokenizer::Create(e, ToyRanks(kMerged));
  REQUIRE(!r.ok());
  CHECK(r.status().message() ==
        "toy: special token <|clash|> has id 259, which is the rank of an ordinary token of "
        "toy.tiktoken");

  e = ToyEncoding();
  e.special_tokens.push_back({"<|pad|>", 302});
  CHECK(!TiktokenTokenizer::Create(e, ToyRanks(kMerged)).ok());

  e = ToyEncoding();
  e.pattern = "(unclosed";
  r = TiktokenTokenizer::Create(e, ToyRanks(kMerged));
  REQUIRE(!r.ok());
  CHECK(std::string(r.status().message()).find("pre-tokenizer pattern does not compile") !=
        std::string::npos);

  CHECK(!TiktokenEncodingByName("o200k_base").ok());
  CHECK(TiktokenEncodingByName("r50k_base")->pattern == Gpt2Encoding().pattern);
}

// Where PCRE2's Unicode tables differ from JavaScript's (and so from js-tiktoken), pinned so
// that a change is noticed; regex_splitter.h lists them. Rust's regex, which tiktoken itself
// uses, agrees with PCRE2 on U+0085 and U+FEFF and on "'\u017F" (long s folds to s).
std::vector<std::string> Pieces(const std::string& pattern, const std::string& text) {
  auto splitter = RegexSplitter::Create(pattern);
  REQUIRE(splitter.ok());
  std::vector<std::string> pieces;
  REQUIRE((*splitter)->Split(text, [&](std::string_view p) { pieces.emplace_back(p); }).ok());
  return pieces;
}

TEST_CASE("documented differences from JavaScript's regex tables") {
  const std::string gpt2 = Gpt2Encoding().pattern, cl100k = Cl100kBaseEncoding().pattern;
  // U+0085 (NEL) is whitespace here (and in Unicode); JavaScript's \s lacks it, so
  // js-tiktoken gives " \u0085" as one piece.
  CHECK(Pieces(gpt2, " \xC2\x85x") == std::vector<std::string>{" ", "\xC2\x85", "x"});
  // U+FEFF (BOM) is not whitespace here (nor in Unicode); JavaScript's \s has it, so
  // js-tiktoken splits it from the "!".
  CHECK(Pieces(gpt2, "a\xEF\xBB\xBF!") == std::vector<std::string>{"a", "\xEF\xBB\xBF!"});
  // U+180E is whitespace in PCRE2 only.
  CHECK(Pieces(gpt2, "a\xE1\xA0\x8E b") == std::vector<std::string>{"a", "\xE1\xA0\x8E", " b"});
  // cl100k_base's case-insensitive contractions take "'\u017F" as "'s".
  CHECK(Pieces(cl100k, "'\xC5\xBFt") == std::vector<std::string>{"'\xC5\xBF", "t"});
  CHECK(Pieces(cl100k, "'St") == std::vector<std::string>{"'S", "t"});
}

TEST_CASE("a match deeper than the JIT's default stack is retried with a larger one") {
  // Each repetition of the group keeps a backtracking frame: far beyond 32 KiB for 1 MiB.
  auto splitter = RegexSplitter::Create("(?:a|bc)+|x");
  REQUIRE(splitter.ok());
  const std::string text = std::string(1 << 20, 'a') + "x";
  std::vector<size_t> sizes;
  const Status status =
      (*splitter)->Split(text, [&](std::string_view p) { sizes.push_back(p.size()); });
  INFO(status);
  REQUIRE(status.ok());
  CHECK(sizes == std::vector<size_t>{size_t{1} << 20, 1});
  // Beyond even the large stack (64 MiB): an error naming where, not a crash.
  const std::string huge = std::string(size_t{64} << 20, 'a');
  const Status too_deep = (*splitter)->Split(huge, [](std::string_view) {});
  REQUIRE(!too_deep.ok());
  CHECK(too_deep.message() ==
        "pre-tokenizer regex failed at byte offset 0: JIT stack limit reached");
}

TEST_CASE("the regex is JIT-compiled where PCRE2 supports it") {
  auto t = Toy();
  INFO("pattern " << t->splitter().pattern());
  CHECK(t->splitter().jit());  // x86-64 Debian's PCRE2 has JIT
}

// Hostile input: megabyte runs of one kind of character, each encoded (a quadratic pass would
// take hours: the test's timeout) and decoded back exactly.
TEST_CASE("megabyte runs encode and round-trip") {
  auto t = Toy();
  const size_t n = 1 << 20;
  std::string combining;
  while (combining.size() < n) combining += "\xCC\x81";  // U+0301, neither letter nor digit
  std::string mixed;
  while (mixed.size() < n) mixed += " \n\t\r ";
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"spaces", std::string(n, ' ')},       {"spaces then a letter", std::string(n, ' ') + "x"},
      {"newlines", std::string(n, '\n')},    {"letters", std::string(n, 'a')},
      {"digits", std::string(n, '7')},       {"punctuation", std::string(n, '!')},
      {"combining marks", combining},        {"mixed whitespace", mixed},
      {"apostrophes", std::string(n, '\'')},
  };
  for (const auto& [name, text] : runs) {
    // No timing asserted: a quadratic pass over these runs would take hours and fail by the
    // test's Bazel timeout.
    const std::vector<TokenId> ids = Ids(*t, text);
    INFO(name << ": " << ids.size() << " ids");
    CHECK(Text(*t, ids) == text);
  }
}

TEST_CASE("several threads and the cache switched off give the same ids") {
  auto t = Toy();
  TiktokenOptions no_cache;
  no_cache.piece_cache_entries = 0;
  auto uncached = Toy(no_cache);
  TiktokenOptions tiny_cache;
  tiny_cache.piece_cache_entries = 3;
  auto tiny = Toy(tiny_cache);
  std::string text;
  for (int i = 0; i < 2000; ++i) {
    text += "hellos worlds helloo llama aaaaaaa " + std::to_string(i * 7919) + "\n";
  }
  const std::vector<TokenId> want = Ids(*uncached, text);
  CHECK(Ids(*t, text) == want);
  CHECK(Ids(*t, text) == want);  // now from the cache
  CHECK(Ids(*tiny, text) == want);
  std::vector<std::vector<TokenId>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int round = 0; round < 3; ++round) got[i] = t->Encode(text).value();
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& ids : got) CHECK(ids == want);
}

}  // namespace
}  // namespace longhaul::data
