// The tokenizer.json tokenizer against an independent implementation: @huggingface/tokenizers,
// Hugging Face's JavaScript implementation of tokenizer.json (test/data/npm, installed by
// tools/setup.sh). No published tokenizer.json is on this machine, so the files are built:
// js-tiktoken writes the gpt2 and cl100k_base rank files (OpenAI's data, checked by sha256 in
// tiktoken_js_agreement_test), and test/data/npm/hf_tokenizers.mjs converts them into
// tokenizer.json files: gpt2 in GPT-2's own form (ByteLevel pre-tokenizer, "a b" merges), and
// cl100k_base in Llama 3's form (Sequence[Split(cl100k's pattern), ByteLevel], [a, b] merges,
// ignore_merges, a TemplateProcessing BOS). Then, on every record (each line of about 1 MiB of
// generated English prose with multilingual, emoji, whitespace and special-token lines mixed
// in, then Debian's license texts as real English, the whole text as one record, and lines with
// invalid UTF-8, which Node replaces by U+FFFD):
//   - HfTokenizer gives the ids @huggingface/tokenizers gives, with special tokens as text
//     and with all of them recognised (then with the post-processor's BOS as well);
//   - HfTokenizer gives the ids TiktokenTokenizer gives on the same ranks;
//   - Decode(Encode(record)) == record.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/hf_tokenizer.h"
#include "data/sample_text.h"
#include "data/tiktoken_tokenizer.h"
#include "test/data/js_reference.h"

namespace longhaul::data {
namespace {

using testing::RankTokenizer;

// The tokenizer.json files made from the rank files, written once per test binary.
const std::string& TokenizerJsonDir() {
  static const std::string dir = [] {
    testing::RequireNode({"@huggingface/tokenizers"});
    const std::string out = testing::ScratchDir() + "/tokenizer-json";
    testing::Run(testing::Node("hf_tokenizers.mjs",
                               absl::StrCat("tokenizer-json ", testing::RankDir(), " ", out)));
    return out;
  }();
  return dir;
}

std::string TokenizerJson(const std::string& encoding) {
  return TokenizerJsonDir() + "/" + encoding + ".tokenizer.json";
}

const HfTokenizer& Hf(const std::string& encoding) {
  static std::map<std::string, std::unique_ptr<HfTokenizer>> loaded;
  auto& t = loaded[encoding];
  if (t == nullptr) {
    const std::string path = TokenizerJson(encoding);
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

const testing::Records& TheRecords() {
  static const testing::Records r =
      testing::MakeRecords(testing::AgreementText(41),
                           {"\x80", "ab\xC3", "x\xE2\x82y", "\xF0\x9F\x98 z", "\xED\xA0\x80!",
                            "\xFF\xFE caf\xC3\xA9", "\xC0\xAF<|endoftext|>\xF4\x90\x80\x80"});
  return r;
}

void CheckAgreement(const std::string& encoding, const std::string& special) {
  const HfTokenizer& hf = Hf(encoding);
  const TiktokenTokenizer& tiktoken = RankTokenizer(encoding);
  const testing::Records& r = TheRecords();
  const std::vector<std::vector<TokenId>> js =
      testing::NodeIds("hf_tokenizers.mjs", TokenizerJson(encoding), special, r);
  REQUIRE(js.size() == r.records.size());
  EncodeOptions options;
  options.allow_all_special = special == "all";
  size_t js_mismatches = 0, tiktoken_mismatches = 0;
  const testing::EncodeCounts counts =
      testing::EncodeRecords(hf, r, options, [&](size_t i, const std::vector<TokenId>& ids) {
        const std::string& record = r.records[i];
        // With special tokens, Hugging Face's encode also adds the post-processor's BOS.
        std::vector<TokenId> with_bos;
        if (options.allow_all_special && hf.bos_id().has_value()) {
          with_bos.push_back(*hf.bos_id());
        }
        with_bos.insert(with_bos.end(), ids.begin(), ids.end());
        testing::CountDifference("@huggingface/tokenizers", i, record, with_bos, js[i],
                                 &js_mismatches);
        testing::CountDifference("TiktokenTokenizer", i, record, ids,
                                 tiktoken.Encode(record, options).value(), &tiktoken_mismatches);
      });
  std::printf(
      "%s, special tokens %s: %zu records (%zu with invalid UTF-8), %zu ids, %zu of them "
      "special; %zu records differ from @huggingface/tokenizers, %zu from TiktokenTokenizer\n",
      encoding.c_str(), special.c_str(), r.records.size(), r.records.size() - r.first_invalid,
      counts.ids, counts.special, js_mismatches, tiktoken_mismatches);
  CHECK(js_mismatches == 0);
  CHECK(tiktoken_mismatches == 0);
  if (special == "all") CHECK(counts.special > 0);
}

TEST_CASE("the converted files describe the tiktoken encodings") {
  for (const std::string encoding : {"gpt2", "cl100k_base"}) {
    const HfTokenizer& hf = Hf(encoding);
    const TiktokenTokenizer& tiktoken = RankTokenizer(encoding);
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
