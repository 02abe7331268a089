// Running the npm reference implementations for the agreement tests (see js_reference.h).
#include "test/data/js_reference.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/sample_text.h"
#include "data/utf8.h"
#include "test/model/test_util.h"

namespace longhaul::data::testing {
namespace {

std::string Show(const std::vector<TokenId>& ids, size_t around) {
  std::string s;
  const size_t from = around > 8 ? around - 8 : 0;
  for (size_t i = from; i < ids.size() && i < around + 8; ++i) absl::StrAppend(&s, ids[i], " ");
  return s;
}

}  // namespace

const std::string& ScratchDir() {
  static const std::string dir = model::testing::TempDir("js-reference");
  return dir;
}

void Run(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) FAIL("command failed: " << cmd);
}

std::string Node(const std::string& script, const std::string& args) {
  return absl::StrCat("node ", model::testing::Runfile("test/data/npm/" + script), " ", args);
}

void RequireNode(const std::vector<std::string>& packages) {
  if (std::system("command -v node >/dev/null 2>&1") != 0) {
    FAIL("node is not installed: run tools/setup.sh (as root) to install Debian's nodejs");
  }
  for (const std::string& package : packages) {
    if (!std::ifstream(model::testing::Runfile(
            absl::StrCat("test/data/npm/node_modules/", package, "/package.json")))) {
      FAIL(package << " is not installed in test/data/npm/node_modules: run tools/setup.sh, "
                      "which runs npm ci there");
    }
  }
}

const std::string& RankDir() {
  static const std::string dir = [] {
    RequireNode({"js-tiktoken"});
    const std::string out = ScratchDir() + "/ranks";
    Run(Node("js_tiktoken.mjs", "ranks " + out));
    return out;
  }();
  return dir;
}

const TiktokenTokenizer& RankTokenizer(const std::string& encoding) {
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

std::string Records::Decoded(size_t i) const {
  return i < first_invalid ? records[i] : ReplaceInvalidUtf8(records[i]);
}

std::string AgreementText(uint64_t seed) {
  std::string text = MixedSampleText(seed, size_t{1} << 20);
  for (const char* name :
       {"Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL-1.2", "GFDL-1.3", "GPL-1", "GPL-2",
        "GPL-3", "LGPL-2", "LGPL-2.1", "LGPL-3", "MPL-1.1", "MPL-2.0"}) {
    std::ifstream in(absl::StrCat("/usr/share/common-licenses/", name), std::ios::binary);
    if (!in) continue;
    std::stringstream s;
    s << in.rdbuf();
    if (!text.empty() && text.back() != '\n') text += '\n';
    text += s.str();
  }
  return text;
}

Records MakeRecords(std::string_view text, std::vector<std::string> invalid) {
  Records r;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    r.records.emplace_back(line.data(), line.size());
  }
  r.records.emplace_back(text);
  r.first_invalid = r.records.size();
  for (std::string& line : invalid) r.records.push_back(std::move(line));
  return r;
}

std::vector<std::vector<TokenId>> NodeIds(const std::string& script, const std::string& tokenizer,
                                          const std::string& special, const Records& records) {
  static int calls = 0;
  const std::string in = absl::StrCat(ScratchDir(), "/records.", calls, ".b64");
  const std::string out = absl::StrCat(ScratchDir(), "/ids.", calls, ".txt");
  ++calls;
  {
    std::ofstream file(in, std::ios::binary);
    for (const std::string& record : records.records) {
      file << absl::Base64Escape(record) << "\n";
    }
  }
  Run(Node(script, absl::StrCat("encode ", tokenizer, " ", special, " ", in, " ", out)));
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

EncodeCounts EncodeRecords(const Tokenizer& tokenizer, const Records& records,
                           const EncodeOptions& options,
                           absl::FunctionRef<void(size_t, const std::vector<TokenId>&)> compare) {
  std::set<TokenId> special_ids;
  for (const SpecialToken& s : tokenizer.special_tokens()) special_ids.insert(s.id);
  EncodeCounts counts;
  for (size_t i = 0; i < records.records.size(); ++i) {
    auto ids = tokenizer.Encode(records.records[i], options);
    INFO(ids.status());
    REQUIRE(ids.ok());
    counts.ids += ids->size();
    for (TokenId id : *ids) counts.special += special_ids.count(id);
    compare(i, *ids);
    auto back = tokenizer.Decode(*ids);
    REQUIRE(back.ok());
    REQUIRE(*back == records.Decoded(i));
  }
  return counts;
}

void CountDifference(const std::string& what, size_t index, const std::string& record,
                     const std::vector<TokenId>& ours, const std::vector<TokenId>& theirs,
                     size_t* mismatches) {
  if (ours == theirs) return;
  if (++*mismatches <= 5) {
    size_t at = 0;
    while (at < ours.size() && at < theirs.size() && ours[at] == theirs[at]) ++at;
    UNSCOPED_INFO(what << ": record " << index << " '" << absl::CHexEscape(record.substr(0, 200))
                       << "': first difference at id " << at << "\n  ours:   " << Show(ours, at)
                       << "\n  theirs: " << Show(theirs, at));
  }
}

}  // namespace longhaul::data::testing
