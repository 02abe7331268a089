// The tokenizer.json tokenizer against an independent implementation: @huggingface/tokenizers,
// Hugging Face's JavaScript implementation of tokenizer.json (test/data/npm, installed by
// tools/setup.sh). No published tokenizer.json is on this machine, so the files are built:
// js-tiktoken writes the gpt2 and cl100k_base rank files (OpenAI's data, checked by sha256 in
// tiktoken_js_agreement_test), and test/data/npm/hf_tokenizers.mjs converts them into
// tokenizer.json files: gpt2 in GPT-2's own form (ByteLevel pre-tokenizer, "a b" merges), and
// cl100k_base in Llama 3's form (Sequence[Split(cl100k's pattern), ByteLevel], [a, b] merges,
// ignore_merges, a TemplateProcessing BOS). Then, on every record (each line of about 1 MiB of
// English prose with multilingual, emoji, whitespace and special-token lines mixed in, the
// whole text as one record, and lines with invalid UTF-8, which Node replaces by U+FFFD):
//   - HfTokenizer gives the ids @huggingface/tokenizers gives, with special tokens as text
//     and with all of them recognised (then with the post-processor's BOS as well);
//   - HfTokenizer gives the ids TiktokenTokenizer gives on the same ranks;
//   - Decode(Encode(record)) == record.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/hf_tokenizer.h"
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

void Run(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) FAIL("command failed: " << cmd);
}

std::string Node(const std::string& script, const std::string& args) {
  return absl::StrCat("node ", Runfile("test/data/npm/" + script), " ", args);
}

// The rank files and the tokenizer.json files made from them, written once per test binary.
const std::string& Dir() {
  static const std::string dir = [] {
    if (std::system("command -v node >/dev/null 2>&1") != 0) {
      FAIL("node is not installed: run tools/setup.sh (as root) to install Debian's nodejs");
    }
    for (const char* package : {"js-tiktoken", "@huggingface/tokenizers"}) {
      if (!std::ifstream(
              Runfile(absl::StrCat("test/data/npm/node_modules/", package, "/package.json")))) {
        FAIL(package << " is not installed in test/data/npm/node_modules: run tools/setup.sh, "
                        "which runs npm ci there");
      }
    }
    const std::string out = TempDir() + "/files";
    Run(Node("js_tiktoken.mjs", "ranks " + out));
    Run(Node("hf_tokenizers.mjs", absl::StrCat("tokenizer-json ", out, " ", out)));
    return out;
  }();
  return dir;
}

const HfTokenizer& Hf(const std::string& encoding) {
  static std::map<std::string, std::unique_ptr<HfTokenizer>> loaded;
  auto& t = loaded[encoding];
  if (t == nullptr) {
    const std::string path = Dir() + "/" + encoding + ".tokenizer.json";
    const auto start = std::chrono::steady_clock::now();
    auto made = HfTokenizer::Load(path);
    INFO(made.status());
    REQUIRE(made.ok());
    t = std::move(made).value();
    std::printf("%s.tokenizer.json: %zu merges, loaded in %.2f s\n", encoding.c_str(),
                t->merge_count(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return *t;
}

const TiktokenTokenizer& Tiktoken(const std::string& encoding) {
  static std::map<std::string, std::unique_ptr<TiktokenTokenizer>> loaded;
  auto& t = loaded[encoding];
  if (t == nullptr) {
    auto made = TiktokenTokenizer::Load(Dir() + "/" + encoding + ".tiktoken",
                                        TiktokenEncodingByName(encoding).value());
    INFO(made.status());
    REQUIRE(made.ok());
    t = std::move(made).value();
  }
  return *t;
}

struct Records {
  std::vector<std::string> records;
  size_t first_invalid = 0;  // records from here on hold invalid UTF-8
};

const Records& TheRecords() {
  static const Records r = [] {
    Records r;
    const std::string text = MixedSampleText(41, size_t{1} << 20);
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      r.records.emplace_back(line.data(), line.size());
    }
    r.records.push_back(text);
    r.first_invalid = r.records.size();
    for (const char* bad : {"\x80", "ab\xC3", "x\xE2\x82y", "\xF0\x9F\x98 z", "\xED\xA0\x80!",
                            "\xFF\xFE caf\xC3\xA9", "\xC0\xAF<|endoftext|>\xF4\x90\x80\x80"}) {
      r.records.emplace_back(bad);
    }
    return r;
  }();
  return r;
}

// @huggingface/tokenizers' ids for every record.
std::vector<std::vector<TokenId>> JsIds(const std::string& encoding, const std::string& special) {
  const std::string in = TempDir() + "/records.b64";
  if (!std::ifstream(in)) {
    std::ofstream out(in, std::ios::binary);
    for (const std::string& record : TheRecords().records) {
      out << absl::Base64Escape(record) << "\n";
    }
  }
  const std::string out = absl::StrCat(TempDir(), "/ids.", encoding, ".", special);
  Run(Node("hf_tokenizers.mjs", absl::StrCat("encode ", Dir(), "/", encoding, ".tokenizer.json ",
                                             special, " ", in, " ", out)));
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

// Counts a difference, describing the first few.
void Compare(const char* what, size_t record, const std::vector<TokenId>& ours,
             const std::vector<TokenId>& theirs, size_t* mismatches) {
  if (ours == theirs) return;
  if (++*mismatches <= 5) {
    size_t at = 0;
    while (at < ours.size() && at < theirs.size() && ours[at] == theirs[at]) ++at;
    UNSCOPED_INFO(what << ": record " << record << " '"
                       << absl::CHexEscape(TheRecords().records[record].substr(0, 200))
                       << "': first difference at id " << at << "\n  ours:   " << Show(ours, at)
                       << "\n  theirs: " << Show(theirs, at));
  }
}

void CheckAgreement(const std::string& encoding, const std::string& special) {
  const HfTokenizer& hf = Hf(encoding);
  const TiktokenTokenizer& tiktoken = Tiktoken(encoding);
  const Records& r = TheRecords();
  const std::vector<std::vector<TokenId>> js = JsIds(encoding, special);
  REQUIRE(js.size() == r.records.size());
  EncodeOptions options;
  options.allow_all_special = special == "all";
  std::set<TokenId> special_ids;
  for (const SpecialToken& s : hf.special_tokens()) special_ids.insert(s.id);
  size_t js_mismatches = 0, tiktoken_mismatches = 0, tokens = 0, specials_seen = 0;
  for (size_t i = 0; i < r.records.size(); ++i) {
    const std::string& record = r.records[i];
    auto ids = hf.Encode(record, options);
    REQUIRE(ids.ok());
    tokens += ids->size();
    for (TokenId id : *ids) specials_seen += special_ids.count(id);
    // With special tokens, Hugging Face's encode also adds the post-processor's BOS.
    std::vector<TokenId> with_bos;
    if (options.allow_all_special && hf.bos_id().has_value()) with_bos.push_back(*hf.bos_id());
    with_bos.insert(with_bos.end(), ids->begin(), ids->end());
    Compare("@huggingface/tokenizers", i, with_bos, js[i], &js_mismatches);
    Compare("TiktokenTokenizer", i, *ids, tiktoken.Encode(record, options).value(),
            &tiktoken_mismatches);
    auto back = hf.Decode(*ids);
    REQUIRE(back.ok());
    REQUIRE(*back == (i < r.first_invalid ? record : ReplaceInvalidUtf8(record)));
  }
  std::printf(
      "%s, special tokens %s: %zu records (%zu with invalid UTF-8), %zu ids, %zu of them "
      "special; %zu records differ from @huggingface/tokenizers, %zu from TiktokenTokenizer\n",
      encoding.c_str(), special.c_str(), r.records.size(), r.records.size() - r.first_invalid,
      tokens, specials_seen, js_mismatches, tiktoken_mismatches);
  CHECK(js_mismatches == 0);
  CHECK(tiktoken_mismatches == 0);
  if (special == "all") CHECK(specials_seen > 0);
}

TEST_CASE("the converted files describe the tiktoken encodings") {
  for (const std::string encoding : {"gpt2", "cl100k_base"}) {
    const HfTokenizer& hf = Hf(encoding);
    const TiktokenTokenizer& tiktoken = Tiktoken(encoding);
    std::vector<std::pair<std::string, TokenId>> ours, theirs;
    for (const SpecialToken& s : hf.special_tokens()) ours.emplace_back(s.text, s.id);
    for (const SpecialToken& s : tiktoken.special_tokens()) theirs.emplace_back(s.text, s.id);
    CHECK(ours == theirs);
    CHECK(hf.vocab_size() == tiktoken.vocab_size());
    CHECK(hf.eot_id() == tiktoken.eot_id());
    CHECK(hf.added_tokens().empty());
  }
  CHECK(Hf("gpt2").pre_tokenizer_patterns() == std::vector<std::string>{Gpt2Encoding().pattern});
  CHECK(Hf("cl100k_base").pre_tokenizer_patterns() ==
        std::vector<std::string>{Cl100kBaseEncoding().pattern});
  CHECK(Hf("gpt2").bos_id() == std::nullopt);
  CHECK(Hf("cl100k_base").bos_id() == 100257u);
  CHECK(Hf("gpt2").merge_count() == 50000);
  CHECK(Hf("cl100k_base").merge_count() == 100000);
}

TEST_CASE("gpt2 form: identical ids to @huggingface/tokenizers and tiktoken, specials as text") {
  CheckAgreement("gpt2", "none");
}
TEST_CASE("gpt2 form: identical ids to @huggingface/tokenizers and tiktoken, specials allowed") {
  CheckAgreement("gpt2", "all");
}
TEST_CASE("Llama 3 form: identical ids to @huggingface/tokenizers and tiktoken, specials as text") {
  CheckAgreement("cl100k_base", "none");
}
TEST_CASE("Llama 3 form: identical ids to @huggingface/tokenizers and tiktoken, specials allowed") {
  CheckAgreement("cl100k_base", "all");
}

}  // namespace
}  // namespace longhaul::data
