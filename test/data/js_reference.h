// What the agreement tests against the npm reference implementations share
// (tiktoken_js_agreement_test, hf_js_agreement_test): running the scripts in test/data/npm
// with node, the rank files js-tiktoken writes, the records both sides encode (text, then
// invalid UTF-8), the scripts' ids for them, and the loop that encodes every record with our
// tokenizer, checks that it decodes back, and counts where the ids differ from a reference's.
// A test binary writes its files into a fresh directory of its own, each file once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "data/tiktoken_tokenizer.h"
#include "data/tokenizer.h"

namespace longhaul::data::testing {

// The test binary's directory for what the scripts write: fresh (emptied) on first use.
const std::string& ScratchDir();

// Runs `cmd` with the shell; a test failure naming the command when it does not exit 0.
void Run(const std::string& cmd);

// The command line that runs test/data/npm/`script` (from the runfiles) with node and `args`.
std::string Node(const std::string& script, const std::string& args);

// A test failure, saying how to install them, unless node is installed and so is each npm
// package of `packages` in test/data/npm/node_modules.
void RequireNode(const std::vector<std::string>& packages);

// The directory holding the gpt2 and cl100k_base rank files (ENCODING.tiktoken) and their
// metadata (ENCODING.json: sha256, pat_str, special_tokens, explicit_n_vocab) as js-tiktoken
// writes them from the ranks it ships (js_tiktoken.mjs ranks), written on first use.
const std::string& RankDir();

// The TiktokenTokenizer over RankDir()'s rank file for `encoding` ("gpt2", "cl100k_base"),
// loaded once.
const TiktokenTokenizer& RankTokenizer(const std::string& encoding);

// The records both implementations encode.
struct Records {
  std::vector<std::string> records;
  size_t first_invalid = 0;  // records from here on hold invalid UTF-8

  // What Decode(Encode(record i)) must give: the record, with U+FFFD in place of each invalid
  // sequence (Node decodes the records that way before the reference sees them).
  std::string Decoded(size_t i) const;
};

// Each line of `text`, then the whole text, then `invalid` (lines holding invalid UTF-8).
Records MakeRecords(std::string_view text, std::vector<std::string> invalid);

// The text the agreement tests encode: about 1 MiB of generated English prose with the
// multilingual and emoji lines mixed in (data/sample_text.h, from `seed`), then real English:
// the license texts Debian ships in /usr/share/common-licenses (about 237 kB), where present.
std::string AgreementText(uint64_t seed);

// The ids test/data/npm/`script` gives for every record: node runs
// `script encode TOKENIZER none|all RECORDS OUT` with `tokenizer` and `special` ("none" or
// "all"), RECORDS holding one base64 record a line and OUT getting one line of
// space-separated ids per record.
std::vector<std::vector<TokenId>> NodeIds(const std::string& script, const std::string& tokenizer,
                                          const std::string& special, const Records& records);

// How many ids EncodeRecords saw, and how many of them were special tokens.
struct EncodeCounts {
  size_t ids = 0;
  size_t special = 0;
};

// Encodes every record with `tokenizer` and `options`, requires each to encode and to decode
// back to Records::Decoded, and hands each record's index and ids to `compare`.
EncodeCounts EncodeRecords(const Tokenizer& tokenizer, const Records& records,
                           const EncodeOptions& options,
                           absl::FunctionRef<void(size_t, const std::vector<TokenId>&)> compare);

// Counts a difference between our ids (`ours`) for the record `record` (number `index`) and
// those of `what` (`theirs`), describing the first five in the test's output.
void CountDifference(const std::string& what, size_t index, const std::string& record,
                     const std::vector<TokenId>& ours, const std::vector<TokenId>& theirs,
                     size_t* mismatches);

}  // namespace longhaul::data::testing
