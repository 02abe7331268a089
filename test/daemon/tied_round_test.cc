// The tied embedding's holders' views of a gossip round (daemon/job/sync/tied_round.h): a view
// round trips; a hostile one is refused, naming what is wrong; two views agree on what both
// took, whichever is first, and on whether the copies had split.
#include "daemon/job/sync/tied_round.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace longhaul::daemon {
namespace {

TiedRoundView View(std::vector<int> came, std::vector<int> unsent, uint64_t removed = 0,
                   uint64_t hash = 7) {
  TiedRoundView v;
  v.kind = kTiedViewRound;
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
  auto back = DecodeTiedRoundView(bytes, 5, 1, kTiedViewRound, 9);
  REQUIRE(back.ok());
  CHECK(back->came == v.came);
  CHECK(back->unsent == v.unsent);
  CHECK(back->removed == 2);
  CHECK(back->hash == 0x0123456789abcdefull);
  TiedRoundView f = View({}, {});
  f.kind = kTiedViewFinal;
  back = DecodeTiedRoundView(EncodeTiedRoundView(f, 2, 0), 2, 0, kTiedViewFinal, 9);
  REQUIRE(back.ok());
  CHECK(back->came.empty());
}

TEST_CASE("tied round view: hostile views are refused, naming what is wrong") {
  const std::vector<uint8_t> good = EncodeTiedRoundView(View({0, 2}, {}), 4, 1);
  auto decode = [](const std::vector<uint8_t>& b, uint32_t kind = kTiedViewRound,
                   uint64_t step = 9) { return DecodeTiedRoundView(b, 4, 1, kind, step).status(); };
  REQUIRE(decode(good).ok());
  // Sizes: short, long, another replica count's.
  std::vector<uint8_t> b(good.begin(), good.end() - 1);
  CHECK(Names(decode(b), "is 44 bytes"));
  b = good;
  b.push_back(0);
  CHECK(absl::IsInvalidArgument(decode(b)));
  CHECK(absl::IsInvalidArgument(DecodeTiedRoundView(good, 3, 1, kTiedViewRound, 9).status()));
  CHECK(decode({}).code() == absl::StatusCode::kInvalidArgument);
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
  // Well formed, but of another sync, kind or version, or flags no view has.
  Status s = decode(good, kTiedViewRound, 4);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "after step 10"));
  CHECK(absl::IsInvalidArgument(decode(good, kTiedViewFinal)));
  TiedRoundView many = View({0}, {});
  many.removed = 5;  // of 4 replicas
  s = decode(EncodeTiedRoundView(many, 4, 1));
  CHECK(Names(s, "5 replicas removed of 4"));
  // Its own replica's byte must be 0: a view that says replica 1's frame came to replica 1.
  const std::vector<uint8_t> own = EncodeTiedRoundView(View({1}, {}), 4, 0);  // replica 0's
  CHECK(DecodeTiedRoundView(own, 4, 0, kTiedViewRound, 9).ok());
  s = DecodeTiedRoundView(own, 4, 1, kTiedViewRound, 9).status();  // read as replica 1's
  CHECK(absl::IsInvalidArgument(s));
  CHECK(Names(s, "replica 1's flags"));
}

TEST_CASE("tied round views agree on what both holders took, whichever is first") {
  // Replica 0 of 4. The first stage's frames came from 1 and 2, the last stage's from 2 and 3;
  // the first's did not go to 3, the last's to 1 or 3.
  const TiedRoundView first = View({1, 2}, {3}, 0, 11), last = View({2, 3}, {1, 3}, 1, 11);
  for (bool swap : {false, true}) {
    INFO("swapped " << swap);
    const TiedAgreement a = swap ? AgreeTiedRound(last, first) : AgreeTiedRound(first, last);
    CHECK(a.came == std::vector<int>{2});    // only what came to both
    CHECK(a.unsent == std::vector<int>{3});  // gone unless neither went
    CHECK(a.removed == 1);                   // the later count
    CHECK_FALSE(a.split);
  }
  CHECK(AgreeTiedRound(first, View({1, 2}, {3}, 0, 12)).split);
  CHECK(TiedHash(std::vector<float>{1.0f, 2.0f}) != TiedHash(std::vector<float>{1.0f, 2.5f}));
  CHECK(TiedHash(std::vector<float>{1.0f, 2.0f}) == TiedHash(std::vector<float>{1.0f, 2.0f}));
}

}  // namespace
}  // namespace longhaul::daemon
