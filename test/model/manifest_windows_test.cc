// Token manifests as a job reads them: the manifest format's checks, windows streamed shard
// by shard (each epoch visits every window once, reading each shard once), weighted mixtures
// (exact shares per period, counted per source), replicas' disjoint shares, resumes, and
// corrupt shards named.
#include "model/manifest_windows.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sha256.h"
#include "model/data_loader.h"
#include "model/job.h"
#include "model/job_windows.h"
#include "model/token_data.h"
#include "model/token_manifest.h"
#include "test/model/test_util.h"

namespace longhaul::model {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using testing::TempDir;  // a fresh, empty directory
using testing::WriteBytes;

constexpr int kT = 8;

// A manifest in `dir` (written there) whose train shards hold `sizes` tokens; the split's
// tokens count up from `base` (so a window is known by its first token); one val shard.
TokenManifest MakeManifest(const std::string& dir, const std::vector<int>& sizes, uint32_t base,
                           uint32_t vocab = 60000) {
  fs::create_directories(dir);
  TokenManifest m;
  m.dir = dir;
  m.tokenizer = {"toy", "tiktoken", std::string(64, 'b'), vocab, vocab - 1, std::nullopt};
  uint32_t next = base;
  auto shard = [&](const std::string& file, int n) {
    std::vector<uint32_t> ids;
    for (int i = 0; i < n; ++i) ids.push_back(next++);
    REQUIRE(WriteTokenFile(dir + "/" + file, ids, TokenWidth::kU16).ok());
    return ManifestShard{file, n, 1, Sha256OfFile(dir + "/" + file, "shard").value()};
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    m.train.push_back(shard(absl::StrFormat("train-%06d.bin", i), sizes[i]));
  }
  m.val.push_back(shard("val-000000.bin", 300));
  WriteBytes(dir + "/manifest.json", TokenManifestToJson(m));
  return m;
}

std::vector<int32_t> Firsts(DataLoader& loader, int batches, int batch) {
  std::vector<int32_t> out, in(size_t(batch) * kT), tg(size_t(batch) * kT);
  for (int i = 0; i < batches; ++i) {
    REQUIRE(loader.Next(in.data(), tg.data()).ok());
    for (int b = 0; b < batch; ++b) {
      for (int t = 0; t < kT; ++t) REQUIRE(tg[size_t(b * kT + t)] == in[size_t(b * kT + t)] + 1);
      out.push_back(in[size_t(b * kT)]);
    }
  }
  return out;
}

TEST_CASE("a manifest round-trips, and hostile ones are refused naming the field") {
  const std::string dir = TempDir("manifest-format");
  TokenManifest m = MakeManifest(dir, {100, 200}, 10);
  auto back = LoadTokenManifest(dir);
  REQUIRE(back.ok());
  CHECK(TokenManifestToJson(*back) == TokenManifestToJson(m));
  CHECK(back->Tokens(false) == 300);
  CHECK(IsManifestPath(dir));
  CHECK(IsManifestPath(dir + "/manifest.json"));
  CHECK(!IsManifestPath(dir + "/train-000000.bin"));
  const std::string good = TokenManifestToJson(m);
  auto refused = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    auto r = ParseTokenManifest(text, "m.json", dir);
    REQUIRE(!r.ok());
    return std::string(r.status().message());
  };
  CHECK_THAT(refused("\"file\":\"train-000000.bin\"", "\"file\":\"../../etc/passwd\""),
             Contains("train[0].file: '../../etc/passwd' is not a plain file name"));
  CHECK_THAT(refused("\"tokens\":100", "\"tokens\":-5"),
             Contains("train[0].tokens: -5 is not a count"));
  CHECK_THAT(refused("\"token_bits\": 16", "\"token_bits\": 12"),
             Contains("token_bits: 12 is not 16 or 32"));
  CHECK_THAT(refused("longhaul-token-manifest", "something-else"),
             Contains("format: 'something-else'"));
  CHECK_THAT(refused("\"vocab_size\": 60000", "\"vocab_size\": 100000"),
             Contains("token_bits: 16 cannot hold the vocabulary's 100000 ids"));
  CHECK_THAT(refused("\"file\":\"train-000001.bin\"", "\"file\":\"train-000000.bin\""),
             Contains("listed twice"));
  CHECK_THAT(std::string(ParseTokenManifest("[[[[", "m.json", dir).status().message()),
             Contains("not valid JSON"));
}

TEST_CASE("a manifest's windows: each epoch visits every window once, reading each shard once") {
  const std::string dir = TempDir("manifest-windows");
  // 3 shards: 81, 41 and 5 tokens: 10, 5 and 0 windows of 8 + 1.
  TokenManifest m = MakeManifest(dir, {81, 41, 5}, 0);
  auto w = ManifestWindows::Create(m, false, kT, true, 3);
  REQUIRE(w.ok());
  ManifestWindows* windows = w->get();
  CHECK(windows->num_windows() == 15);
  DataLoaderOptions lo;
  lo.batch_size = 5;
  lo.seq_len = kT;
  lo.seed = 3;
  auto loader = DataLoader::Create(std::move(*w), lo);
  REQUIRE(loader.ok());
  const std::vector<int32_t> epoch0 = Firsts(**loader, 3, 5);
  CHECK(windows->shard_reads() == 2);  // the empty shard is never read
  const std::vector<int32_t> epoch1 = Firsts(**loader, 3, 5);
  const std::set<int32_t> a(epoch0.begin(), epoch0.end()), b(epoch1.begin(), epoch1.end());
  CHECK(a.size() == 15);
  CHECK(a == b);
  CHECK(epoch0 != epoch1);  // another order
  std::set<int32_t> expected;
  for (int i = 0; i < 10; ++i) expected.insert(i * kT);
  for (int i = 0; i < 5; ++i) expected.insert(81 + i * kT);
  CHECK(a == expected);
  // A restored loader goes on with the same windows; one on other data refuses the state.
  auto again = DataLoader::Create(*ManifestWindows::Create(m, false, kT, true, 3), lo);
  REQUIRE(again.ok());
  const DataLoaderState s = (*loader)->state();
  CHECK_THAT(s.Serialize(), Contains(" data="));
  REQUIRE((*again)->Restore(DataLoaderState::Parse(s.Serialize()).value()).ok());
  CHECK(Firsts(**again, 4, 5) == Firsts(**loader, 4, 5));
  TokenManifest other = MakeManifest(TempDir("manifest-other"), {81, 41, 5}, 1);
  auto foreign = DataLoader::Create(*ManifestWindows::Create(other, false, kT, true, 3), lo);
  REQUIRE(foreign.ok());
  CHECK_THAT(std::string((*foreign)->Restore(s).message()), Contains("does not match"));
  // Too short for the sequence length.
  CHECK_THAT(std::string(ManifestWindows::Create(m, false, 100, true, 3).status().message()),
             Contains("needs"));
}

TEST_CASE("a corrupt or truncated shard is an error naming it, not data") {
  const std::string dir = TempDir("manifest-corrupt");
  TokenManifest m = MakeManifest(dir, {81, 81}, 0);
  DataLoaderOptions lo;
  lo.batch_size = 10;
  lo.seq_len = kT;
  lo.shuffle = false;
  {
    std::fstream f(dir + "/train-000001.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1024 + 10);
    f.put('\x7f');
  }
  auto loader = DataLoader::Create(*ManifestWindows::Create(m, false, kT, false, 0), lo);
  REQUIRE(loader.ok());
  std::vector<int32_t> in(10 * kT), tg(10 * kT);
  REQUIRE((*loader)->Next(in.data(), tg.data()).ok());  // shard 0 is fine
  Status s = (*loader)->Next(in.data(), tg.data());
  CHECK_THAT(std::string(s.message()), Contains("train-000001.bin' is corrupt: its SHA-256"));
  fs::resize_file(dir + "/train-000000.bin", 1024 + 100);
  auto fresh = DataLoader::Create(*ManifestWindows::Create(m, false, kT, false, 0), lo);
  s = (*fresh)->Next(in.data(), tg.data());
  CHECK_THAT(std::string(s.message()), Contains("train-000000.bin' is corrupt"));
}

TEST_CASE("a mixture gives each source its weight's share, counted per source") {
  const std::string dir = TempDir("mixture");
  std::vector<MixturePart> parts;
  parts.push_back(
      {*ManifestWindows::Create(MakeManifest(dir + "/a", {801, 801}, 0), false, kT, true, 1), 0.7});
  parts.push_back(
      {*ManifestWindows::Create(MakeManifest(dir + "/b", {401}, 30000), false, kT, true, 2), 0.3});
  auto mix = MixtureWindows::Create(std::move(parts));
  REQUIRE(mix.ok());
  CHECK((*mix)->shares() == std::vector<int64_t>{700, 300});
  // Any prefix holds each source within one window of its share.
  for (int64_t end : {1, 7, 10, 333, 999, 1000, 1001, 4321}) {
    const int64_t a = (*mix)->PartWindows(0, end), b = (*mix)->PartWindows(1, end);
    CHECK(a + b == end);
    CHECK(std::abs(double(a) - 0.7 * double(end)) <= 1.0);
  }
  DataLoaderOptions lo;
  lo.batch_size = 4;
  lo.seq_len = kT;
  lo.seed = 5;
  auto loader = DataLoader::Create(std::move(*mix), lo);
  REQUIRE(loader.ok());
  const std::vector<int32_t> firsts = Firsts(**loader, 250, 4);
  int64_t from_b = 0;
  for (int32_t f : firsts) from_b += f >= 30000;
  CHECK(from_b == 300);
  CHECK((*loader)->part_windows() == std::vector<int64_t>{700, 300});
  CHECK_THAT(std::string(MixtureWindows::Create({}).status().message()), Contains("at least one"));
}

TEST_CASE("replicas read disjoint shares of a mixture that together are one loader's") {
  const std::string dir = TempDir("mixture-shards");
  auto make = [&]() {
    std::vector<MixturePart> parts;
    parts.push_back(
        {*ManifestWindows::Create(MakeManifest(dir + "/a", {401, 161}, 0), false, kT, true, 1), 2});
    parts.push_back(
        {*ManifestWindows::Create(MakeManifest(dir + "/b", {241}, 30000), false, kT, true, 2), 1});
    return std::unique_ptr<WindowSource>(
        std::move(MixtureWindows::Create(std::move(parts)).value()));
  };
  DataLoaderOptions lo;
  lo.batch_size = 2;
  lo.seq_len = kT;
  lo.seed = 9;
  auto whole = DataLoader::Create(make(), lo);
  REQUIRE(whole.ok());
  // Replica 0 trains 2 microbatches a step, replica 1 one.
  std::vector<std::unique_ptr<DataLoader>> replicas;
  for (int r = 0; r < 2; ++r) {
    DataLoaderOptions o = lo;
    SetShard({4, 2}, r, &o);
    replicas.push_back(std::move(DataLoader::Create(make(), o).value()));
  }
  std::vector<int32_t> one = Firsts(**whole, 60, 2), together;
  std::vector<int32_t> r0, r1;
  for (int step = 0; step < 20; ++step) {
    const auto a = Firsts(*replicas[0], 2, 2);
    const auto b = Firsts(*replicas[1], 1, 2);
    together.insert(together.end(), a.begin(), a.end());
    together.insert(together.end(), b.begin(), b.end());
    r0.insert(r0.end(), a.begin(), a.end());
    r1.insert(r1.end(), b.begin(), b.end());
  }
  CHECK(together == one);
  // Within one epoch of each source no window is read by both.
  std::set<int32_t> s0(r0.begin(), r0.begin() + 30), s1(r1.begin(), r1.begin() + 15);
  for (int32_t f : s1) CHECK(s0.count(f) == 0);
  // Counts per source: the replicas' sum is the single loader's, and survive a restore.
  for (size_t p = 0; p < 2; ++p) {
    CHECK(replicas[0]->part_windows()[p] + replicas[1]->part_windows()[p] ==
          (*whole)->part_windows()[p]);
  }
  DataLoaderOptions o = lo;
  SetShard({4, 2}, 1, &o);
  auto restored = DataLoader::Create(make(), o);
  REQUIRE((*restored)->Restore(replicas[1]->state()).ok());
  CHECK((*restored)->part_windows() == replicas[1]->part_windows());
}

Job MixtureJob(const std::string& yaml_data, const std::string& dir) {
  const std::string yaml = absl::StrCat(
      "name: m\nmodel: {layers: 1, channels: 16, heads: 2, vocab: 60000, context: 8}\n", yaml_data,
      "steps: 2\nbatch_size: 2\n");
  auto job = ParseJob(yaml, "job.yaml", dir);
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  return *job;
}

TEST_CASE("jobs name manifests and mixtures; a manifest of another vocabulary is refused") {
  const std::string dir = TempDir("job-manifests");
  MakeManifest(dir + "/a", {401}, 0);
  MakeManifest(dir + "/b", {401}, 30000);
  MakeManifest(dir + "/small", {401}, 0, 256);
  Job job = MixtureJob(
      "data: {train: [{manifest: a, weight: 3}, {manifest: b/manifest.json}], val: a}\n", dir);
  REQUIRE(job.data.mixture.size() == 2);
  CHECK(job.data.mixture[0].manifest == dir + "/a");
  CHECK(job.data.mixture[0].weight == 3);
  CHECK(job.data.mixture[1].weight == 1);
  CHECK(job.data.train.empty());
  auto train = JobTrainWindows(job, kT);
  REQUIRE(train.ok());
  CHECK((*train)->num_parts() == 2);
  auto val = JobValWindows(job, kT);
  REQUIRE(val.ok());
  CHECK((*val)->num_windows() == 299 / kT);
  Job single = MixtureJob("data: {train: a}\n", dir);
  REQUIRE(JobTrainWindows(single, kT).ok());
  Job wrong = MixtureJob("data: {train: small}\n", dir);
  CHECK_THAT(
      std::string(JobTrainWindows(wrong, kT).status().message()),
      Contains(
          "was made with tokenizer 'toy' (vocabulary 256), but the model's vocabulary is 60000"));
  auto parse_error = [&](const std::string& data) {
    auto j = ParseJob(
        absl::StrCat(
            "name: m\nmodel: {layers: 1, channels: 16, heads: 2, vocab: 60000, context: 8}\n", data,
            "steps: 2\nbatch_size: 2\n"),
        "job.yaml", dir);
    REQUIRE(!j.ok());
    return std::string(j.status().message());
  };
  CHECK_THAT(parse_error("data: {train: []}\n"), Contains("data.train: an empty list"));
  CHECK_THAT(parse_error("data: {train: [{manifest: a/train-000000.bin}]}\n"),
             Contains("a/train-000000.bin' is not a token manifest"));
  CHECK_THAT(parse_error("data: {train: [{manifest: a, weight: 0}]}\n"),
             Contains("data.train[0].weight"));
  CHECK_THAT(parse_error("data: {train: [{manifest: nowhere}]}\n"), Contains("data.train[0]"));
  CHECK_THAT(parse_error("data: {train: [{manifest: a, wieght: 2}]}\n"), Contains("wieght"));
}

}  // namespace
}  // namespace longhaul::model
