// The C++ tokenizer against an independent implementation: js-tiktoken, the npm port of
// OpenAI's tiktoken (test/data/npm, installed by tools/setup.sh). js-tiktoken writes the
// gpt2 and cl100k_base rank files from the ranks it ships (their sha256 must be tiktoken's
// published ones, so the data is OpenAI's), then both implementations encode the same
// records and every id must agree:
//   - every line of about 1 MiB of generated English prose with multilingual, emoji,
//     whitespace, digit, contraction and special-token lines mixed in (data/sample_text.h),
//     then the real English of Debian's license texts (testing::AgreementText), and the
//     whole text as one record;
//   - lines with invalid UTF-8, which Node decodes with U+FFFD replacement before
//     js-tiktoken sees them (our InvalidUtf8::kReplace);
// for both encodings, with special tokens as ordinary text and with all of them allowed.
// Decode(Encode(line)) must give back every line. Characters where the two regex engines'
// tables differ (regex_splitter.h) are kept out of the text; tiktoken_tokenizer_test pins them.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "data/sample_text.h"
#include "data/tiktoken_tokenizer.h"
#include "data/utf8.h"
#include "test/data/js_reference.h"

namespace longhaul::data {
namespace {

using testing::RankTokenizer;

// The metadata js-tiktoken writes beside a rank file.
nlohmann::json Meta(const std::string& encoding) {
  std::ifstream in(testing::RankDir() + "/" + encoding + ".json");
  return nlohmann::json::parse(in);
}

// Random concatenations of valid text and broken UTF-8 (lone continuation bytes, truncated
// and overlong sequences, surrogates, bytes that never occur): none can form one of the
// characters where the regex tables differ.
std::vector<std::string> InvalidUtf8Lines() {
  const std::vector<std::string> broken = {
      "\x80",     "\xBF",         "\xC0\xAF",     "\xC3",
      "\xE2\x82", "\xF0\x9F\x98", "\xED\xA0\x80", "\xF4\x90\x80\x80",
      "\xFF",     "\xFE",         "\xE0\x80\x80", "\xF8\x88\x80\x80\x80"};
  const std::vector<std::string> valid = {
      "abc",   " ", "  ", "\xC3\xA9", "\xF0\x9F\x98\x80", "\xE4\xB8\xAD\xE6\x96\x87", "don't", "'s",
      "12345", "!", "\t", "Word"};
  std::mt19937_64 rng(37);
  std::vector<std::string> lines;
  for (const std::string& b : broken) lines.push_back(b);
  for (int i = 0; i < 2000; ++i) {
    std::string line;
    const int parts = 1 + int(rng() % 12);
    for (int p = 0; p < parts; ++p) {
      line += rng() % 3 == 0 ? broken[rng() % broken.size()] : valid[rng() % valid.size()];
    }
    if (FirstInvalidUtf8(line) != std::string_view::npos) lines.push_back(line);
  }
  return lines;
}

// The records both implementations encode: each line of the mixed sample text, then the
// whole text, then lines with invalid UTF-8.
const testing::Records& TheRecords() {
  static const testing::Records r =
      testing::MakeRecords(testing::AgreementText(37), InvalidUtf8Lines());
  return r;
}

void CheckAgreement(const std::string& encoding, const std::string& special) {
  const TiktokenTokenizer& t = RankTokenizer(encoding);
  const testing::Records& r = TheRecords();
  const std::vector<std::vector<TokenId>> js =
      testing::NodeIds("js_tiktoken.mjs", encoding, special, r);
  REQUIRE(js.size() == r.records.size());
  EncodeOptions options;
  options.allow_all_special = special == "all";
  size_t mismatches = 0;
  const testing::EncodeCounts counts =
      testing::EncodeRecords(t, r, options, [&](size_t i, const std::vector<TokenId>& ids) {
        testing::CountDifference(
            absl::StrCat("js-tiktoken, ", encoding, ", special tokens ", special), i, r.records[i],
            ids, js[i], &mismatches);
      });
  std::printf(
      "%s, special tokens %s: %zu records (%zu with invalid UTF-8), %zu ids, %zu of them "
      "special; %zu records differ from js-tiktoken\n",
      encoding.c_str(), special.c_str(), r.records.size(), r.records.size() - r.first_invalid,
      counts.ids, counts.special, mismatches);
  CHECK(mismatches == 0);
  if (special == "all") CHECK(counts.special > 0);
}

TEST_CASE("the rank files are tiktoken's, and the encodings match js-tiktoken's definitions") {
  // tiktoken_ext/openai_public.py's expected_hash of r50k_base.tiktoken (GPT-2's ranks) and
  // cl100k_base.tiktoken.
  CHECK(Meta("gpt2")["sha256"] ==
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930");
  CHECK(Meta("cl100k_base")["sha256"] ==
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7");
  for (const std::string encoding : {"gpt2", "cl100k_base"}) {
    const nlohmann::json meta = Meta(encoding);
    const TiktokenTokenizer& t = RankTokenizer(encoding);
    // JSON objects come back in key order; compare as maps.
    std::map<std::string, TokenId> js_specials, ours;
    for (const auto& [text, id] : meta["special_tokens"].items()) js_specials[text] = id;
    for (const SpecialToken& s : t.special_tokens()) ours[s.text] = s.id;
    CHECK(ours == js_specials);
    if (!meta["explicit_n_vocab"].is_null()) {
      CHECK(t.vocab_size() == meta["explicit_n_vocab"].get<uint32_t>());
    }
  }
  CHECK(Meta("gpt2")["pat_str"] == Gpt2Encoding().pattern);
  CHECK(RankTokenizer("gpt2").eot_id() == 50256u);
  CHECK(RankTokenizer("cl100k_base").eot_id() == 100257u);
  CHECK(RankTokenizer("cl100k_base").vocab_size() == 100277u);
}

TEST_CASE("gpt2: identical ids to js-tiktoken, special tokens as text") {
  CheckAgreement("gpt2", "none");
}
TEST_CASE("gpt2: identical ids to js-tiktoken, special tokens allowed") {
  CheckAgreement("gpt2", "all");
}
TEST_CASE("cl100k_base: identical ids to js-tiktoken, special tokens as text") {
  CheckAgreement("cl100k_base", "none");
}
TEST_CASE("cl100k_base: identical ids to js-tiktoken, special tokens allowed") {
  CheckAgreement("cl100k_base", "all");
}

// Hostile input on the real vocabularies: megabyte runs (one piece of a million letters goes
// through the heap merge), decoded back exactly. No timing is asserted: a merge quadratic in the
// piece would take hours here and fail by the test's Bazel timeout.
TEST_CASE("megabyte runs on the real vocabularies") {
  const size_t n = 1 << 20;
  std::string words;
  while (words.size() < n) words += "Supercalifragilistic";
  std::string spaces_lines;
  while (spaces_lines.size() < n) spaces_lines += "   \n  \r\n\t ";
  for (const std::string encoding : {"gpt2", "cl100k_base"}) {
    const TiktokenTokenizer& t = RankTokenizer(encoding);
    for (const std::string& text : {std::string(n, 'a'), words, std::string(n, ' ') + "x",
                                    spaces_lines, std::string(n, '9'), std::string(n, '.')}) {
      auto ids = t.Encode(text);
      REQUIRE(ids.ok());
      INFO(encoding << ": " << text.size() << " bytes starting '"
                    << absl::CHexEscape(text.substr(0, 12)) << "' -> " << ids->size() << " ids");
      CHECK(t.Decode(*ids).value() == text);
    }
  }
}

}  // namespace
}  // namespace longhaul::data
