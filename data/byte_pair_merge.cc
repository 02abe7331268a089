// tiktoken's byte-pair merge over a RankMap (see byte_pair_merge.h; the algorithms are the
// templates there).
#include "data/byte_pair_merge.h"

namespace longhaul::data {

void BytePairEncodeRescan(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out) {
  BytePairEncodeRescanWith(piece, RankMapRanks{ranks}, out);
}

void BytePairEncodeHeap(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out) {
  BytePairEncodeHeapWith(piece, RankMapRanks{ranks}, out);
}

void BytePairEncode(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out) {
  BytePairEncodeWith(piece, RankMapRanks{ranks}, out);
}

}  // namespace longhaul::data
