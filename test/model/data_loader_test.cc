// The data loader's order is a deterministic function of the seed, visits every window
// once per epoch, and resumes exactly from a saved state; the built-in corpus is
// deterministic.
#include "model/data_loader.h"

#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "model/corpus.h"

namespace longhaul::model {
namespace {

std::shared_ptr<const TokenData> Counting(int n) {
  auto data = std::make_shared<TokenData>();
  data->source = "counting";
  for (int i = 0; i < n; ++i) data->tokens.push_back(uint32_t(i));
  data->max_token = n - 1;
  return data;
}

std::vector<int32_t> Batches(DataLoader& loader, int batches, int bt) {
  std::vector<int32_t> all, in(bt), tg(bt);
  for (int i = 0; i < batches; ++i) {
    REQUIRE(loader.Next(in.data(), tg.data()).ok());
    for (int j = 0; j < bt; ++j) {
      REQUIRE(tg[j] == in[j] + 1);  // targets are inputs shifted by one
    }
    all.insert(all.end(), in.begin(), in.end());
  }
  return all;
}

TEST_CASE("same seed, same order; another seed, another order", "[data]") {
  const DataLoaderOptions o{.batch_size = 3, .seq_len = 4, .seed = 11, .shuffle = true};
  auto a = DataLoader::Create(Counting(101), o);
  auto b = DataLoader::Create(Counting(101), o);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK((*a)->num_windows() == 25);
  CHECK(Batches(**a, 20, 12) == Batches(**b, 20, 12));
  DataLoaderOptions o2 = o;
  o2.seed = 12;
  auto c = DataLoader::Create(Counting(101), o2);
  auto d = DataLoader::Create(Counting(101), o);
  CHECK(Batches(**c, 5, 12) != Batches(**d, 5, 12));
}

TEST_CASE("an epoch visits every window once", "[data]") {
  const DataLoaderOptions o{.batch_size = 5, .seq_len = 4, .seed = 3, .shuffle = true};
  auto loader = DataLoader::Create(Counting(81), o);  // 20 windows, 4 batches per epoch
  REQUIRE(loader.ok());
  const std::vector<int32_t> epoch = Batches(**loader, 4, 20);
  std::set<int32_t> starts;
  for (size_t i = 0; i < epoch.size(); i += 4) starts.insert(epoch[i]);
  CHECK(starts.size() == 20);
  CHECK(*starts.rbegin() == 76);
  const DataLoaderOptions seq{.batch_size = 2, .seq_len = 4, .seed = 3, .shuffle = false};
  auto ordered = DataLoader::Create(Counting(81), seq);
  CHECK(Batches(**ordered, 1, 8) == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("a restored loader continues exactly", "[data]") {
  const DataLoaderOptions o{.batch_size = 2, .seq_len = 8, .seed = 5, .shuffle = true};
  auto original = DataLoader::Create(Counting(200), o);
  REQUIRE(original.ok());
  Batches(**original, 17, 16);  // crosses an epoch boundary (24 windows)
  const std::string saved = (*original)->state().Serialize();
  const std::vector<int32_t> expected = Batches(**original, 30, 16);

  auto state = DataLoaderState::Parse(saved);
  REQUIRE(state.ok());
  auto resumed = DataLoader::Create(Counting(200), o);
  REQUIRE((*resumed)->Restore(*state).ok());
  CHECK(Batches(**resumed, 30, 16) == expected);

  DataLoaderOptions other = o;
  other.seed = 6;
  auto wrong = DataLoader::Create(Counting(200), other);
  CHECK(!(*wrong)->Restore(*state).ok());
  CHECK(!DataLoaderState::Parse("dataloader v1 seed=1").ok());
  CHECK(!DataLoaderState::Parse(saved + " junk").ok());
}

TEST_CASE("shards read, block after block, what one loader reads", "[data]") {
  // 3 shards of blocks of 4 windows (2 batches of 2): a step of 3 replicas with 2 microbatches
  // each covers a step of one pipeline with 6.
  const DataLoaderOptions whole{.batch_size = 2, .seq_len = 4, .seed = 9, .shuffle = true};
  auto one = DataLoader::Create(Counting(161), whole);  // 40 windows: crosses epochs
  REQUIRE(one.ok());
  std::vector<std::unique_ptr<DataLoader>> shards;
  for (int r = 0; r < 3; ++r) {
    DataLoaderOptions o = whole;
    o.shards = 3;
    o.shard = r;
    o.shard_block = 4;
    auto l = DataLoader::Create(Counting(161), o);
    REQUIRE(l.ok());
    shards.push_back(std::move(*l));
  }
  for (int step = 0; step < 12; ++step) {
    std::vector<int32_t> expected = Batches(**one, 6, 8), got;
    for (auto& shard : shards) {
      const std::vector<int32_t> part = Batches(*shard, 2, 8);
      got.insert(got.end(), part.begin(), part.end());
    }
    INFO("step " << step);
    CHECK(got == expected);
  }
  // A shard's state names it: it resumes only as the same shard.
  const std::string saved = shards[1]->state().Serialize();
  CHECK(saved.find(" shard=1/3 block=4") != std::string::npos);
  auto state = DataLoaderState::Parse(saved);
  REQUIRE(state.ok());
  CHECK(state->shard == 1);
  CHECK(state->shards == 3);
  CHECK(state->shard_block == 4);
  CHECK(shards[1]->Restore(*state).ok());
  CHECK(!shards[2]->Restore(*state).ok());
  CHECK(!(*one)->Restore(*state).ok());
  CHECK(!DataLoaderState::Parse((*one)->state().Serialize() + " shard=3/3 block=4").ok());
  CHECK(!DataLoaderState::Parse((*one)->state().Serialize() + " shard=0/3 block=0").ok());
  CHECK((*one)->state().Serialize().find("shard") == std::string::npos);  // the old line
  CHECK(saved.find("round") == std::string::npos);  // equal blocks: the line they had
  DataLoaderOptions bad = whole;
  bad.shards = 2;
  bad.shard = 2;
  CHECK(!DataLoader::Create(Counting(161), bad).ok());
}

TEST_CASE("data shorter than one sequence is an error", "[data]") {
  const DataLoaderOptions o{.batch_size = 1, .seq_len = 8, .seed = 0, .shuffle = true};
  auto loader = DataLoader::Create(Counting(8), o);
  CHECK(!loader.ok());
  CHECK(DataLoader::Create(Counting(9), o).ok());
}

TEST_CASE("the built-in corpus is deterministic English-like text", "[data]") {
  const std::string a = BuiltinCorpus(1, 10000);
  CHECK(a == BuiltinCorpus(1, 10000));
  CHECK(a != BuiltinCorpus(2, 10000));
  CHECK(a.size() == 10000);
  for (char ch : a) {
    REQUIRE(((ch >= ' ' && ch <= '~') || ch == '\n'));
  }
  CHECK(a.find(" the ") != std::string::npos);
}

TEST_CASE("shards of unequal blocks read, round after round, what one loader reads", "[data]") {
  // 3 replicas training 3, 1 and 2 microbatches of 2 sequences per step: blocks of 6, 2 and 4
  // windows at offsets 0, 6 and 8 of a round of 12; a step of them covers a step of one
  // pipeline with 6 microbatches.
  const DataLoaderOptions whole{.batch_size = 2, .seq_len = 4, .seed = 3, .shuffle = true};
  auto one = DataLoader::Create(Counting(161), whole);  // 40 windows: crosses epochs
  REQUIRE(one.ok());
  const int microbatches[3] = {3, 1, 2};
  std::vector<std::unique_ptr<DataLoader>> shards;
  int64_t offset = 0;
  for (int r = 0; r < 3; ++r) {
    DataLoaderOptions o = whole;
    o.shards = 3;
    o.shard = r;
    o.shard_block = 2 * microbatches[r];
    o.shard_round = 12;
    o.shard_offset = offset;
    offset += o.shard_block;
    auto l = DataLoader::Create(Counting(161), o);
    REQUIRE(l.ok());
    shards.push_back(std::move(*l));
  }
  for (int step = 0; step < 10; ++step) {
    std::vector<int32_t> expected = Batches(**one, 6, 8), got;
    for (int r = 0; r < 3; ++r) {
      const std::vector<int32_t> part = Batches(*shards[r], microbatches[r], 8);
      got.insert(got.end(), part.begin(), part.end());
    }
    INFO("step " << step);
    CHECK(got == expected);
  }
  // The round and offset are part of the state: it resumes only where they agree.
  const std::string saved = shards[1]->state().Serialize();
  CHECK(saved.find(" shard=1/3 block=2 round=12 offset=6") != std::string::npos);
  auto state = DataLoaderState::Parse(saved);
  REQUIRE(state.ok());
  CHECK(state->round == 12);
  CHECK(state->offset == 6);
  CHECK(shards[1]->Restore(*state).ok());
  CHECK(!shards[0]->Restore(*state).ok());
  DataLoaderState moved = *state;
  moved.offset = 4;
  CHECK(!shards[1]->Restore(moved).ok());
  // Shard 0's block sits where equal blocks would put it, but its round is not 3 x 6.
  CHECK(shards[0]->state().Serialize().find(" round=12 offset=0") != std::string::npos);
  const std::string line = (*one)->state().Serialize() + " shard=1/3 block=2";
  CHECK(!DataLoaderState::Parse(line + " round=12 offset=11").ok());  // past the round
  CHECK(!DataLoaderState::Parse(line + " round=0 offset=0").ok());
  CHECK(!DataLoaderState::Parse(line + " round=12").ok());
  CHECK(DataLoaderState::Parse(line + " round=12 offset=10").ok());
  DataLoaderOptions bad = whole;
  bad.shards = 2;
  bad.shard = 1;
  bad.shard_block = 4;
  bad.shard_round = 6;
  bad.shard_offset = 4;  // 4 + 4 > 6
  CHECK(!DataLoader::Create(Counting(161), bad).ok());
}

}  // namespace
}  // namespace longhaul::model
