// The C++ tokenizer against an independent implementation: js-tiktoken, the npm port of
// OpenAI's tiktoken (test/data/npm, installed by tools/setup.sh). js-tiktoken writes the
// gpt2 and cl100k_base rank files from the ranks it ships (their sha256 must be tiktoken's
// published ones, so the data is OpenAI's), then both implementations encode the same
// records and every id must agree:
//   - every line of about 1 MiB of generated English prose with multilingual, emoji,
//     whitespace, digit, contraction and special-token lines mixed in (data/sample_text.h),
//     and the whole text as one record;
//   - lines with invalid UTF-8, which Node decodes with U+FFFD replacement before
//     js-tiktoken sees them (our InvalidUtf8::kReplace);
// for both encodings, with special tokens as ordinary text and with all of them allowed.
// Decode(Encode(line)) must give back every line. Characters where the two regex engines'
// tables differ (regex_splitter.h) are kept out of the text; tiktoken_tokenizer_test pins them.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/sample_text.h"
#include "data/tiktoken_tokenizer.h"
#include "data/utf8.h"

namespace longhaul::data {
namespace {

std::string Runfile(const std::string& path) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return srcdir == nullptr ? path : absl::StrCat(srcdir, "/longhaul/", path);
}

std::string TempDir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp == nullptr ? "/tmp" : tmp;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Run(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) FAIL("command failed: " << cmd);
}

std::string Node(const std::string& args) {
  return absl::StrCat("node ", Runfile("test/data/npm/js_tiktoken.mjs"), " ", args);
}

// The rank files and their metadata, written once per test binary by js-tiktoken.
const std::string& RankDir() {
  static const std::string dir = [] {
    if (std::system("command -v node >/dev/null 2>&1") != 0) {
      FAIL("node is not installed: run tools/setup.sh (as root) to install Debian's nodejs");
    }
    if (!std::ifstream(Runfile("test/data/npm/node_modules/js-tiktoken/package.json"))) {
      FAIL(
          "js-tiktoken is not installed in test/data/npm/node_modules: run tools/setup.sh, "
          "which runs npm ci there");
    }
    const std::string out = TempDir() + "/ranks";
    Run(Node("ranks " + out));
    return out;
  }();
  return dir;
}

nlohmann::json Meta(const std::string& encoding) {
  return nlohmann::json::parse(ReadFile(RankDir() + "/" + encoding + ".json"));
}

const TiktokenTokenizer& Tokenizer(const std::string& encoding) {
  static std::map<std::string, std::unique_ptr<TiktokenTokenizer>> loaded;
  auto& t = loaded[encoding];
  if (t == nullptr) {
    auto made = TiktokenTokenizer::Load(RankDir() + "/" + encoding + ".tiktoken",
                                        TiktokenEncodingByName(encoding).value());
    INFO(made.status());
    REQUIRE(made.ok());
    t = std::move(made).value();
  }
  return *t;
}

// The records both implementations encode: each line of the mixed sample text, then the
// whole text, then lines with invalid UTF-8.
struct Records {
  std::vector<std::string> records;
  size_t first_invalid = 0;  // records from here on hold invalid UTF-8
};

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

const Records& TheRecords() {
  static const Records r = [] {
    Records r;
    const std::string text = MixedSampleText(37, size_t{1} << 20);
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      r.records.emplace_back(line.data(), line.size());
    }
    r.records.push_back(text);
    r.first_invalid = r.records.size();
    for (std::string& line : InvalidUtf8Lines()) r.records.push_back(std::move(line));
    return r;
  }();
  return r;
}

// js-tiktoken's ids for every record.
std::vector<std::vector<TokenId>> JsIds(const std::string& encoding, const std::string& special) {
  const std::string in = TempDir() + "/records.b64";
  if (!std::ifstream(in)) {
    std::ofstream out(in, std::ios::binary);
    for (const std::string& record : TheRecords().records)
      out << absl::Base64Escape(record) << "\n";
  }
  const std::string out = absl::StrCat(TempDir(), "/ids.", encoding, ".", special);
  Run(Node(absl::StrCat("encode ", encoding, " ", special, " ", in, " ", out)));
  std::vector<std::vector<TokenId>> ids;
  std::ifstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<TokenId> row;
    for (absl::string_view id : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      row.push_back(TokenId(std::stoul(std::string(id.data(), id.size()))));
    }
    ids.push_back(std::move(row));
  }
  return ids;
}

std::string Show(const std::vector<TokenId>& ids, size_t around) {
  std::string s;
  const size_t from = around > 8 ? around - 8 : 0;
  for (size_t i = from; i < ids.size() && i < around + 8; ++i) absl::StrAppend(&s, ids[i], " ");
  return s;
}

void CheckAgreement(const std::string& encoding, const std::string& special) {
  const TiktokenTokenizer& t = Tokenizer(encoding);
  const Records& r = TheRecords();
  const std::vector<std::vector<TokenId>> js = JsIds(encoding, special);
  REQUIRE(js.size() == r.records.size());
  EncodeOptions options;
  options.allow_all_special = special == "all";
  std::set<TokenId> special_ids;
  for (const SpecialToken& s : t.special_tokens()) special_ids.insert(s.id);
  size_t mismatches = 0, tokens = 0, specials_seen = 0;
  for (size_t i = 0; i < r.records.size(); ++i) {
    const std::string& record = r.records[i];
    auto ids = t.Encode(record, options);
    REQUIRE(ids.ok());
    tokens += ids->size();
    for (TokenId id : *ids) specials_seen += special_ids.count(id);
    if (*ids != js[i]) {
      ++mismatches;
      if (mismatches <= 5) {
        size_t at = 0;
        while (at < ids->size() && at < js[i].size() && (*ids)[at] == js[i][at]) ++at;
        UNSCOPED_INFO(encoding << "/" << special << " record " << i << " '"
                               << absl::CHexEscape(record.substr(0, 200))
                               << "': first difference at id " << at << "\n  ours: "
                               << Show(*ids, at) << "\n  js:   " << Show(js[i], at));
      }
    }
    // Decode(Encode(x)) == x; for invalid UTF-8, x with U+FFFD in place.
    auto back = t.Decode(*ids);
    REQUIRE(back.ok());
    if (i < r.first_invalid) {
      REQUIRE(*back == record);
    } else {
      REQUIRE(*back == ReplaceInvalidUtf8(record));
    }
  }
  std::printf(
      "%s, special tokens %s: %zu records (%zu with invalid UTF-8), %zu ids, %zu of them "
      "special; %zu records differ from js-tiktoken\n",
      encoding.c_str(), special.c_str(), r.records.size(), r.records.size() - r.first_invalid,
      tokens, specials_seen, mismatches);
  CHECK(mismatches == 0);
  if (special == "all") CHECK(specials_seen > 0);
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
    const TiktokenTokenizer& t = Tokenizer(encoding);
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
  CHECK(Tokenizer("gpt2").eot_id() == 50256u);
  CHECK(Tokenizer("cl100k_base").eot_id() == 100257u);
  CHECK(Tokenizer("cl100k_base").vocab_size() == 100277u);
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
// through the heap merge) in bounded time, decoded back exactly.
TEST_CASE("megabyte runs on the real vocabularies") {
  const size_t n = 1 << 20;
  std::string words;
  while (words.size() < n) words += "Supercalifragilistic";
  std::string spaces_lines;
  while (spaces_lines.size() < n) spaces_lines += "   \n  \r\n\t ";
  for (const std::string encoding : {"gpt2", "cl100k_base"}) {
    const TiktokenTokenizer& t = Tokenizer(encoding);
    for (const std::string& text : {std::string(n, 'a'), words, std::string(n, ' ') + "x",
                                    spaces_lines, std::string(n, '9'), std::string(n, '.')}) {
      const auto start = std::chrono::steady_clock::now();
      auto ids = t.Encode(text);
      REQUIRE(ids.ok());
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      INFO(encoding << ": " << text.size() << " bytes starting '"
                    << absl::CHexEscape(text.substr(0, 12)) << "' -> " << ids->size() << " ids in "
                    << seconds << " s");
      CHECK(seconds < 10.0);
      CHECK(t.Decode(*ids).value() == text);
    }
  }
}

}  // namespace
}  // namespace longhaul::data
