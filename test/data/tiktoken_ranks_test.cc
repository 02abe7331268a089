// Rank files are hostile input: every malformed one must be an error that names the file,
// the line and what is wrong (data/tiktoken_ranks.h).
#include "data/tiktoken_ranks.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>

#include "test/data/toy_ranks.h"

namespace longhaul::data {
namespace {

using testing::ToyRankFile;

// The error message of parsing `contents`, which must fail.
std::string ErrorOf(const std::string& contents) {
  auto ranks = ParseTiktokenRanks(contents, "bad.tiktoken");
  REQUIRE(!ranks.ok());
  return std::string(ranks.status().message());
}

TEST_CASE("a well-formed rank file parses") {
  const TiktokenRanks ranks = testing::ToyRanks({"ab", "abc", " the"});
  REQUIRE(ranks.tokens.size() == 259);
  CHECK(ranks.tokens[65] == "A");
  CHECK(ranks.tokens[258] == " the");
  CHECK(ranks.rank_of.at(std::string(" the")) == 258);
  CHECK(ranks.rank_of.find(std::string_view("abc")) != ranks.rank_of.end());
  CHECK(ranks.source == "toy.tiktoken");
}

TEST_CASE("empty lines are skipped, as tiktoken does") {
  std::string file = ToyRankFile({"ab"});
  file.insert(0, "\n");
  file += "\n\n";
  auto ranks = ParseTiktokenRanks(file, "x");
  REQUIRE(ranks.ok());
  CHECK(ranks->tokens.size() == 257);
}

TEST_CASE("malformed lines name file:line and the problem") {
  const std::string good = ToyRankFile({});  // lines 1..256
  // Line 257 is the bad one in each case.
  CHECK(ErrorOf(good + "YWI=\n") ==
        "bad.tiktoken:257: expected '<base64 token> <rank>', found 'YWI='");
  CHECK(ErrorOf(good + "YWI= 256 7\n").find("bad.tiktoken:257: expected") == 0);
  CHECK(ErrorOf(good + "YWI=  256\n").find("bad.tiktoken:257: expected") == 0);
  CHECK(ErrorOf(good + "YW*= 256\n") == "bad.tiktoken:257: malformed base64 token 'YW*='");
  CHECK(ErrorOf(good + "YWI 256\n") == "bad.tiktoken:257: malformed base64 token 'YWI'");
  CHECK(ErrorOf(good + "YWI=\r 256\n").find("bad.tiktoken:257: malformed base64") == 0);
  CHECK(ErrorOf(good + "YWJ= 256\n").find("malformed base64") !=
        std::string::npos);  // not canonical
  CHECK(ErrorOf(good + " 256\n") == "bad.tiktoken:257: empty token");
  CHECK(ErrorOf(good + "YWI= -1\n") == "bad.tiktoken:257: rank '-1' is not a number");
  CHECK(ErrorOf(good + "YWI= 25x\n") == "bad.tiktoken:257: rank '25x' is not a number");
  CHECK(ErrorOf(good + "YWI= 99999999999\n") ==
        "bad.tiktoken:257: rank '99999999999' is not a number");
  CHECK(ErrorOf(good + "YWI= 256\r\n") == "bad.tiktoken:257: rank '256\\r' is not a number");
}

TEST_CASE("duplicate ranks, gaps and duplicate tokens are errors") {
  const std::string good = ToyRankFile({});
  CHECK(ErrorOf(good + "YWI= 255\n") == "bad.tiktoken:257: duplicate rank 255 (first on line 256)");
  CHECK(ErrorOf(good + "YWI= 258\n") ==
        "bad.tiktoken:257: rank 258 where 256 was expected: ranks must be 0, 1, 2, ... in order, "
        "with no gaps (missing 256..257)");
  CHECK(ErrorOf(good + "YWI= 257\n").find("(missing 256)") != std::string::npos);
  CHECK(ErrorOf(good + "QQ== 256\n") ==
        "bad.tiktoken:257: duplicate token 'QQ==' (rank 65 on line 66)");
  CHECK(ErrorOf("QQ== 1\n").find("bad.tiktoken:1: rank 1 where 0 was expected") == 0);
}

TEST_CASE("huge lines and files with no ranks or missing bytes are errors") {
  const std::string good = ToyRankFile({});
  const std::string huge(kMaxRankLineBytes + 1, 'Q');
  CHECK(ErrorOf(good + huge + "\n") ==
        "bad.tiktoken:257: line is 1025 bytes, more than the limit of 1024");
  CHECK(ErrorOf(good + std::string(10 << 20, 'A')).find("bad.tiktoken:257: line is 10485760") == 0);
  CHECK(ErrorOf("") == "bad.tiktoken: no ranks in the file");
  CHECK(ErrorOf("\n\n") == "bad.tiktoken: no ranks in the file");
  // Only bytes 0..127.
  std::string half;
  for (int b = 0; b < 128; ++b)
    half += absl::Base64Escape(std::string(1, char(b))) + " " + std::to_string(b) + "\n";
  CHECK(ErrorOf(half) ==
        "bad.tiktoken: byte 0x80 has no rank: byte-level BPE needs each of the 256 single bytes "
        "as a token");
}

TEST_CASE("LoadTiktokenRanks reads a file and names it in errors") {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp == nullptr ? "/tmp" : tmp;
  const std::string path = dir + "/toy.tiktoken";
  std::ofstream(path, std::ios::binary) << ToyRankFile({"ab"}) << "YWI= 300\n";
  auto ranks = LoadTiktokenRanks(path);
  REQUIRE(!ranks.ok());
  CHECK(std::string(ranks.status().message()).find(path + ":258: rank 300 where 257") == 0);

  auto missing = LoadTiktokenRanks(dir + "/no-such.tiktoken");
  REQUIRE(!missing.ok());
  CHECK(std::string(missing.status().message()).find("no-such.tiktoken") != std::string::npos);
}

}  // namespace
}  // namespace longhaul::data
