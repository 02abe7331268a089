// data prepare: input listing, text pieces that encode as the whole, shards and manifest,
// the same output for any thread count, resuming after a crash, bad input counted with file
// and line, and the refusals.
#include "data/prepare.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/document_reader.h"
#include "data/sample_text.h"
#include "data/tiktoken_tokenizer.h"
#include "model/token_data.h"
#include "model/token_manifest.h"
#include "test/data/toy_ranks.h"
#include "test/model/test_util.h"

namespace longhaul::data {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using model::testing::TempDir;  // a fresh, empty directory

const std::vector<std::string> kMerged = {"he",   "ll",     "llo", "hello", " w",  "or",
                                          "orld", " world", "th",  " th",   "the", " the",
                                          "in",   " in",    "an",  " an"};

std::unique_ptr<TiktokenTokenizer> Toy(TiktokenEncoding e) {
  e.name = "toy";
  e.special_tokens = {{"<|endoftext|>", 300}};
  e.expected_ranks = 256 + kMerged.size();
  auto t = TiktokenTokenizer::Create(std::move(e), testing::ToyRanks(kMerged));
  REQUIRE(t.ok());
  return std::move(t).value();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::vector<uint32_t> Concat(const model::TokenManifest& m, bool val) {
  std::vector<uint32_t> all;
  for (size_t i = 0; i < m.split(val).size(); ++i) {
    auto ids = model::ReadManifestShard(m, val, i, true);
    REQUIRE(ids.ok());
    all.insert(all.end(), ids->begin(), ids->end());
  }
  return all;
}

PrepareTokenizer Info(const Tokenizer& t) {
  PrepareTokenizer p;
  p.tokenizer = &t;
  p.info.name = "toy";
  p.info.kind = "tiktoken";
  p.info.sha256 = std::string(64, 'a');
  return p;
}

TEST_CASE("text pieces cut where no pattern joins the two sides encode as the whole text") {
  for (TiktokenEncoding e : {Gpt2Encoding(), Cl100kBaseEncoding()}) {
    auto tok = Toy(e);
    std::string text = MixedSampleText(7, 200'000, 10);
    text += "a\n\nb x.\nb x\r\nb  \nb 12\n34 'tis\n's \n\tz";
    const auto whole = tok->Encode(text).value();
    for (size_t piece : {size_t{1}, size_t{100}, size_t{4096}}) {
      std::vector<TokenId> parts;
      size_t at = 0, cuts = 0;
      while (at < text.size()) {
        size_t cut = FindTextCut(text, at + piece);
        if (cut == std::string::npos) cut = text.size();
        REQUIRE(tok->EncodeTo(std::string_view(text).substr(at, cut - at), {}, &parts).ok());
        at = cut;
        cuts += 1;
      }
      INFO(e.name << " pieces of " << piece << " bytes: " << cuts);
      CHECK(cuts > 10);
      CHECK(parts == whole);
    }
  }
}

TEST_CASE("inputs: files as given, directories walked in name order, hidden files skipped") {
  const std::string dir = TempDir("inputs");
  WriteFile(dir + "/b/two.txt", "two");
  WriteFile(dir + "/a.jsonl", "{}");
  WriteFile(dir + "/b/one.md", "one");
  WriteFile(dir + "/b/skip.bin", "x");
  WriteFile(dir + "/.hidden/h.txt", "h");
  WriteFile(dir + "/c.dat", "x");
  auto in = ListInputs({dir, dir + "/c.dat"});
  REQUIRE(in.ok());
  REQUIRE(in->size() == 4);
  CHECK((*in)[0].path == dir + "/a.jsonl");
  CHECK((*in)[0].kind == InputKind::kJsonLines);
  CHECK((*in)[1].path == dir + "/b/one.md");
  CHECK((*in)[2].path == dir + "/b/two.txt");
  CHECK((*in)[3].kind == InputKind::kText);
  CHECK_THAT(std::string(ListInputs({dir + "/nope"}).status().message()),
             Contains("does not exist"));
  const std::string empty = TempDir("inputs-empty");
  WriteFile(empty + "/x.bin", "x");
  CHECK_THAT(std::string(ListInputs({empty}).status().message()), Contains("holds no .txt"));
}

// The text of JSON line i.
std::string Document(int i) {
  const std::string text = EnglishSampleText(uint64_t(i), 300);
  return text.substr(0, text.find('\n')) + "\n<|endoftext|> is text here";
}

// A corpus: text files and JSON lines with bad lines of every kind.
std::string MakeCorpus(const std::string& name) {
  const std::string dir = TempDir(name);
  WriteFile(dir + "/in/prose.txt", MixedSampleText(3, 300'000, 25));
  std::string jsonl;
  for (int i = 0; i < 400; ++i) {
    const nlohmann::json doc = {{"id", i}, {"text", Document(i)}};
    absl::StrAppend(&jsonl, doc.dump(), "\n");
  }
  jsonl += "{\"text\": \"truncated\n";               // line 401: malformed JSON
  jsonl += "[1, 2]\n";                               // 402: not an object
  jsonl += "{\"id\": 5}\n";                          // 403: no field
  jsonl += "{\"text\": 17}\n";                       // 404: not a string
  jsonl += "\n";                                     // 405: blank, skipped
  jsonl += "{\"text\": \"bad \xff byte\"}\n";        // 406: invalid UTF-8, replaced
  jsonl += "{\"text\": \"no newline at the end\"}";  // 407
  WriteFile(dir + "/in/docs.jsonl", jsonl);
  return dir;
}

TEST_CASE("prepare: shards and a manifest; every thread count writes the same bytes") {
  const std::string dir = MakeCorpus("prepare");
  auto tok = Toy(Gpt2Encoding());
  PrepareOptions o;
  o.inputs = {dir + "/in"};
  o.shard_tokens = 20'000;
  o.text_piece_bytes = 4096;
  o.val_fraction = 0.05;
  o.out_dir = dir + "/one";
  auto one = PrepareData(o, Info(*tok), {});
  REQUIRE(one.ok());
  o.out_dir = dir + "/three";
  o.threads = 3;
  auto three = PrepareData(o, Info(*tok), {});
  REQUIRE(three.ok());
  auto m = model::LoadTokenManifest(dir + "/one");
  REQUIRE(m.ok());
  CHECK(m->token_bits == 16);
  CHECK(m->tokenizer.vocab_size == 301);
  CHECK(m->tokenizer.eot_id == 300u);
  CHECK(m->train.size() > 3);
  CHECK(!m->val.empty());
  CHECK(model::TokenManifestToJson(*m) == model::TokenManifestToJson(three->manifest));
  // Documents: 400 JSON lines + 2 more good ones + one text file; 4 bad, 1 replaced.
  int64_t docs = 0;
  for (const auto& s : m->sources) docs += s.documents;
  CHECK(docs == 403);
  CHECK(m->bad_documents == 4);
  REQUIRE(m->bad_examples.size() == 4);
  CHECK(m->bad_examples[0].file == dir + "/in/docs.jsonl");
  CHECK(m->bad_examples[0].line == 401);
  CHECK_THAT(m->bad_examples[0].reason, Contains("malformed JSON"));
  CHECK(m->bad_examples[1].line == 402);
  CHECK(m->bad_examples[1].reason == "not a JSON object");
  CHECK(m->bad_examples[2].reason == "no field 'text'");
  CHECK(m->bad_examples[3].reason == "field 'text' is not a string");
  CHECK(m->sources[0].replaced_utf8 == 1);
  // Train and val together are the documents in order, each ending in <|endoftext|>, and the
  // special-token string inside a document stayed text.
  std::vector<uint32_t> train = Concat(*m, false), val = Concat(*m, true);
  CHECK(std::count(train.begin(), train.end(), 300u) + std::count(val.begin(), val.end(), 300u) ==
        403);
  CHECK(m->Tokens(false) + m->Tokens(true) == int64_t(train.size() + val.size()));
  const auto first = tok->Encode(Document(0)).value();
  REQUIRE(train.size() > first.size());
  CHECK(std::vector<uint32_t>(train.begin(), train.begin() + first.size()) ==
        std::vector<uint32_t>(first.begin(), first.end()));
  // A finished directory is not prepared again by accident.
  auto again = PrepareData(o, Info(*tok), {});
  CHECK(absl::IsAlreadyExists(again.status()));
  o.force = true;
  CHECK(PrepareData(o, Info(*tok), {}).ok());
}

TEST_CASE(
    "prepare: a crash after a shard resumes to the same output; changed options are refused") {
  const std::string dir = MakeCorpus("resume");
  auto tok = Toy(Cl100kBaseEncoding());
  PrepareOptions o;
  o.inputs = {dir + "/in/docs.jsonl", dir + "/in/prose.txt"};
  o.shard_tokens = 15'000;
  o.text_piece_bytes = 2048;
  o.val_fraction = 0.1;
  o.out_dir = dir + "/whole";
  auto whole = PrepareData(o, Info(*tok), {});
  REQUIRE(whole.ok());
  REQUIRE(whole->manifest.train.size() > 4);
  o.out_dir = dir + "/crashed";
  o.crash_after_train_shards = 2;
  CHECK(absl::IsAborted(PrepareData(o, Info(*tok), {}).status()));
  CHECK(fs::exists(dir + "/crashed/.prepare/state.json"));
  CHECK(!fs::exists(dir + "/crashed/manifest.json"));
  // Another crash later on, then the rest.
  o.crash_after_train_shards = 4;
  o.threads = 2;
  auto second = PrepareData(o, Info(*tok), {});
  CHECK(absl::IsAborted(second.status()));
  PrepareOptions changed = o;
  changed.val_fraction = 0.2;
  changed.crash_after_train_shards = -1;
  CHECK_THAT(std::string(PrepareData(changed, Info(*tok), {}).status().message()),
             Contains("interrupted run with other inputs or options"));
  o.crash_after_train_shards = -1;
  auto resumed = PrepareData(o, Info(*tok), {});
  REQUIRE(resumed.ok());
  CHECK(resumed->resumed);
  CHECK(resumed->bytes < whole->bytes);
  CHECK(model::TokenManifestToJson(resumed->manifest) ==
        model::TokenManifestToJson(whole->manifest));
  CHECK(!fs::exists(dir + "/crashed/.prepare"));
}

TEST_CASE("prepare: what it refuses") {
  const std::string dir = MakeCorpus("refuse");
  auto tok = Toy(Gpt2Encoding());
  PrepareOptions o;
  o.inputs = {dir + "/in"};
  o.out_dir = dir + "/out";
  o.val_fraction = 1.5;
  CHECK_THAT(std::string(PrepareData(o, Info(*tok), {}).status().message()),
             Contains("not in [0, 1)"));
  o.val_fraction = 0;
  o.max_bad_documents = 3;
  CHECK_THAT(std::string(PrepareData(o, Info(*tok), {}).status().message()),
             Contains("4 bad documents, more than the 3 allowed; no manifest written"));
  CHECK(!fs::exists(dir + "/out/manifest.json"));
  o.force = true;
  o.max_bad_documents = -1;
  o.token_bits = 8;
  CHECK_THAT(std::string(PrepareData(o, Info(*tok), {}).status().message()),
             Contains("not 16 or 32"));
  o.token_bits = 32;
  auto wide = PrepareData(o, Info(*tok), {});
  REQUIRE(wide.ok());
  CHECK(wide->manifest.token_bits == 32);
  WriteFile(dir + "/allbad/x.jsonl", "nope\n[1]\n");
  o.inputs = {dir + "/allbad"};
  CHECK_THAT(std::string(PrepareData(o, Info(*tok), {}).status().message()),
             Contains("no training tokens (2 bad documents"));
}

TEST_CASE("prepare: a line-less text is cut anyway, and said; one run per directory") {
  const std::string dir = model::testing::TempDir("prepare-lineless");
  std::string blob;
  for (int i = 0; i < 3000; ++i) absl::StrAppend(&blob, "word", i % 7, "\xc3\xa9 ");  // no '\n'
  WriteFile(dir + "/in/blob.txt", blob);
  auto tok = Toy(Gpt2Encoding());
  PrepareOptions o;
  o.inputs = {dir + "/in"};
  o.out_dir = dir + "/out";
  o.text_piece_bytes = 1000;
  o.text_scan_bytes = 4000;
  o.val_fraction = 0;
  auto r = PrepareData(o, Info(*tok), {});
  REQUIRE(r.ok());
  const auto& m = r->manifest;
  CHECK(m.bad_documents == 0);
  REQUIRE(m.bad_by_reason.count("text cut without a line break (kept)") == 1);
  CHECK(m.bad_by_reason.at("text cut without a line break (kept)") >= 3);
  CHECK_THAT(m.bad_examples[0].reason, Contains("cut at a character boundary"));
  // Every cut fell between characters: the whole decodes back to the text.
  std::vector<uint32_t> ids = Concat(m, false);
  ids.pop_back();  // the end-of-text
  auto text = tok->Decode(std::vector<TokenId>(ids.begin(), ids.end()));
  REQUIRE(text.ok());
  CHECK(*text == blob);
  // A second run on the same directory while one holds it is refused.
  const int fd = ::open((dir + "/out/.prepare.lock").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  o.force = true;
  CHECK_THAT(std::string(PrepareData(o, Info(*tok), {}).status().message()),
             Contains("another `longhaul data prepare` is writing"));
  ::close(fd);
  CHECK(PrepareData(o, Info(*tok), {}).ok());
}

TEST_CASE("prepare: a file name that is not UTF-8 is an input like any other") {
  const std::string dir = TempDir("prepare-latin1");
  WriteFile(dir + "/in/caf\xe9.txt", "Caf\xe9 au lait, then the ships left.\nAnother line.\n");
  auto tok = Toy(Gpt2Encoding());
  PrepareOptions o;
  o.inputs = {dir + "/in"};
  o.out_dir = dir + "/out";
  o.val_fraction = 0;
  auto r = PrepareData(o, Info(*tok), {});
  INFO(r.status());
  REQUIRE(r.ok());
  CHECK(r->manifest.sources.size() == 1);
  CHECK(r->manifest.sources[0].replaced_utf8 == 1);  // the file's own Latin-1 byte
  CHECK(model::LoadTokenManifest(dir + "/out").ok());
}

}  // namespace
}  // namespace longhaul::data
