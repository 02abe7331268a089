// The tied embedding's holders in a gossip job (daemon/job/sync/tied_round.h): a view and the
// first stage's frames round trip; hostile ones are refused, naming what is wrong; the two
// views agree on the first stage's frames, the later removal and whether the copies split.
#include "daemon/job/sync/tied_round.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace longhaul::daemon {
namespace {

TiedRoundView View(std::vector<int> came, std::vector<int> unsent, uint64_t removed = 0,
                   uint64_t hash = 7) {
  TiedRoundView v;
  v.step = 9;
  v.removed = removed;
  v.hash = hash;
  v.came = std::move(came);
  v.unsent = std::move(unsent);
  return v;
}

bool Names(const Status& s, const std::string& what) {
  return std::string(s.message()).find(what) != std::string::npos;
}

TEST_CASE("tied round view: round trip, bit for bit") {
  // Replica 1 of 5: frames came from 0, 3 and 4, its own did not go to 3.
  const TiedRoundView v = View({0, 3, 4}, {3}, 2, 0x0123456789abcdefull);
  const std::vector<uint8_t> bytes = EncodeTiedRoundView(v, 5, 1);
  REQUIRE(bytes.size() == TiedRoundViewBytes(5));
  auto back = DecodeTiedRoundView(bytes, 5, 1, 9);
  REQUIRE(back.ok());
  CHECK(back->came == v.came);
  CHECK(back->unsent == v.unsent);
  CHECK(back->removed == 2);
  CHECK(back->hash == 0x0123456789abcdefull);
  back = DecodeTiedRoundView(EncodeTiedRoundView(View({}, {}), 2, 0), 2, 0, 9);
  REQUIRE(back.ok());
  CHECK(back->came.empty());
}

TEST_CASE("tied round view: hostile views are refused, naming what is wrong") {
  const std::vector<uint8_t> good = EncodeTiedRoundView(View({0, 2}, {}), 4, 1);
  auto decode = [](const std::vector<uint8_t>& b, uint64_t step = 9) {
    return DecodeTiedRoundView(b, 4, 1, step).status();
  };
  REQUIRE(decode(good).ok());
  // Sizes: short, long, another replica count's.
  std::vector<uint8_t> b(good.begin(), good.end() - 1);
  CHECK(Names(decode(b), "is 44 bytes"));
  b = good;
  b.push_back(0);
  CHECK(absl::IsInvalidArgument(decode(b)));
  CHECK(absl::IsInvalidArgument(DecodeTiedRoundView(good, 3, 1, 9).status()));
  CHECK(absl::IsInvalidArgument(decode({})));
  // A flipped byte anywhere is a checksum mismatch (the magic's: a bad magic).
  for (size_t i = 4; i < good.size(); ++i) {
    b = good;
    b[i] ^= 0x10;
    INFO("byte " << i);
    CHECK(absl::IsDataLoss(decode(b)));
  }
  b = good;
  b[0] = 'X';
  CHECK(Names(decode(b), "bad magic"));
  // Well formed, but of another sync, or naming more removals than replicas.
  Status s = decode(good, 4);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "after step 10"));
  TiedRoundView many = View({0}, {});
  many.removed = 5;  // of 4 replicas
  CHECK(Names(decode(EncodeTiedRoundView(many, 4, 1)), "5 replicas removed of 4"));
  // Its own replica's byte must be 0: a view saying replica 1's frame came, read by replica 1.
  const std::vector<uint8_t> own = EncodeTiedRoundView(View({1}, {}), 4, 0);  // replica 0's
  CHECK(DecodeTiedRoundView(own, 4, 0, 9).ok());
  s = DecodeTiedRoundView(own, 4, 1, 9).status();
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "replica 1's flags"));
}

TEST_CASE("tied round views: the first stage's frames, the later removal, a split") {
  // Replica 0 of 4. The first stage's frames came from 1 and 2 and did not go to 3; the last
  // stage exchanged none of the embedding, and knows of one removal more.
  const TiedRoundView first = View({1, 2}, {3}, 0, 11), last = View({}, {}, 1, 11);
  const TiedAgreement a = AgreeTiedRound(first, last);
  CHECK(a.came == std::vector<int>{1, 2});
  CHECK(a.unsent == std::vector<int>{3});
  CHECK(a.removed == 1);
  CHECK_FALSE(a.split);
  CHECK(AgreeTiedRound(first, View({}, {}, 0, 12)).split);
  CHECK(TiedHash(std::vector<float>{1.0f, 2.0f}) != TiedHash(std::vector<float>{1.0f, 2.5f}));
  CHECK(TiedHash(std::vector<float>{1.0f, 2.0f}) == TiedHash(std::vector<float>{1.0f, 2.0f}));
}

TEST_CASE("tied frames: round trip; hostile containers are refused, naming what is wrong") {
  // Replica 1 of 4 took frames from 0 and 3 (at most 16 bytes each).
  const std::vector<TiedFrame> frames = {{0, {1, 2, 3}}, {3, std::vector<uint8_t>(16, 9)}};
  const std::vector<uint8_t> good = EncodeTiedFrames(9, frames);
  CHECK(good.size() <= TiedFramesMaxBytes(4, 16));
  auto back = DecodeTiedFrames(good, 4, 1, 9, 16);
  REQUIRE(back.ok());
  CHECK(*back == frames);
  back = DecodeTiedFrames(EncodeTiedFrames(9, {}), 4, 1, 9, 16);
  REQUIRE(back.ok());
  CHECK(back->empty());
  auto encode = [](std::vector<TiedFrame> f) { return EncodeTiedFrames(9, f); };
  auto decode = [](const std::vector<uint8_t>& b, int self = 1, uint64_t most = 16) {
    return DecodeTiedFrames(b, 4, self, 9, most).status();
  };
  // Larger than a round's frames can take; a frame larger than one can be.
  CHECK(Names(decode(good, 1, 15), "frame 1 of 16 bytes (at most 15"));
  CHECK(absl::IsInvalidArgument(decode(encode({{0, {}}, {2, {}}, {3, {}}, {1, {}}}))));
  // From this replica, out of order, twice from one, from outside the job.
  Status s = decode(good, 3);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "from replica 3"));
  CHECK(absl::IsInvalidArgument(decode(encode({{3, {1}}, {0, {1}}}))));
  CHECK(absl::IsInvalidArgument(decode(encode({{0, {1}}, {0, {1}}}))));
  CHECK(absl::IsInvalidArgument(decode(encode({{4, {1}}}))));
  // Another sync's; a flipped byte; cut short.
  CHECK(Names(DecodeTiedFrames(good, 4, 1, 8, 16).status(), "after step 10"));
  for (size_t i = 4; i < good.size(); ++i) {
    std::vector<uint8_t> b = good;
    b[i] ^= 0x01;
    INFO("byte " << i);
    CHECK(absl::IsDataLoss(decode(b)));
  }
  CHECK(absl::IsInvalidArgument(decode(std::vector<uint8_t>(good.begin(), good.begin() + 20))));
}

}  // namespace
}  // namespace longhaul::daemon
