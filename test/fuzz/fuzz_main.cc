// The driver of longhaul's fuzz targets when they are built as ordinary tests (gcc, under
// --config=asan in CI): each target defines LLVMFuzzerTestOneInput, as libFuzzer wants, and
// may define LonghaulFuzzSeeds to add valid inputs built in code. The driver runs the seeds
// (the committed corpus in test/fuzz/corpus/TARGET and those of the code), then a fixed
// number of seeded random mutations of them (bit flips, byte sets, inserts, deletes,
// duplicated and spliced ranges, boundary values), so a run is deterministic and bounded.
// Any crash, sanitizer report or failed invariant (the target aborts) fails the test.
//
// Environment: LONGHAUL_FUZZ_RUNS (mutations; default 20000), LONGHAUL_FUZZ_SEED (default 1).
// Arguments: corpus directories (default: test/fuzz/corpus/<name of the binary>).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) void LonghaulFuzzSeeds(std::vector<std::string>* seeds);

namespace {

constexpr size_t kMaxLen = 1 << 16;

void Run(const std::string& input) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

std::string Mutate(std::string s, const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  static const uint64_t kInteresting[] = {0,          1,          0x7f,       0x80,
                                          0xff,       0x7fff,     0xffff,     0x7fffffff,
                                          0xffffffff, 1ull << 32, ~0ull >> 1, ~0ull};
  const int edits = 1 + static_cast<int>(rng() % 8);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:  // set a byte
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng());
        break;
      case 2: {  // insert random bytes
        std::string ins(1 + pick(16), '\0');
        for (char& c : ins) c = static_cast<char>(rng());
        s.insert(pick(s.size() + 1), ins);
        break;
      }
      case 3:  // delete a range
        if (!s.empty()) {
          const size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(64, s.size() - at)));
        }
        break;
      case 4:  // duplicate a range
        if (!s.empty()) {
          const size_t at = pick(s.size());
          const std::string part = s.substr(at, 1 + pick(64));
          s.insert(pick(s.size() + 1), part);
        }
        break;
      case 5: {  // splice with another seed
        const std::string& other = seeds[pick(seeds.size())];
        if (!other.empty()) {
          const size_t at = pick(other.size());
          s = s.substr(0, pick(s.size() + 1)) + other.substr(at, 1 + pick(other.size() - at));
        }
        break;
      }
      default: {  // a boundary value, little endian, 1-8 bytes wide
        if (s.empty()) break;
        const uint64_t v = kInteresting[pick(std::size(kInteresting))];
        const size_t width = 1 + pick(8), at = pick(s.size());
        for (size_t i = 0; i < width && at + i < s.size(); ++i)
          s[at + i] = static_cast<char>(v >> (8 * i));
      }
    }
  }
  if (s.size() > kMaxLen) s.resize(kMaxLen);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const std::string name = fs::path(argv[0]).filename().string();
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) dirs.push_back(argv[i]);
  if (dirs.empty()) dirs.push_back("test/fuzz/corpus/" + name);
  std::vector<std::string> seeds;
  for (const auto& dir : dirs) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      seeds.push_back(ss.str().substr(0, kMaxLen));
    }
  }
  if (LonghaulFuzzSeeds) LonghaulFuzzSeeds(&seeds);
  if (seeds.empty()) seeds.push_back("");
  const char* runs_env = std::getenv("LONGHAUL_FUZZ_RUNS");
  const char* seed_env = std::getenv("LONGHAUL_FUZZ_SEED");
  const long runs = runs_env ? std::atol(runs_env) : 20000;
  std::mt19937_64 rng(seed_env ? std::strtoull(seed_env, nullptr, 10) : 1);
  const auto start = std::chrono::steady_clock::now();
  for (const auto& s : seeds) Run(s);
  for (long i = 0; i < runs; ++i) Run(Mutate(seeds[rng() % seeds.size()], seeds, rng));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu seeds and %ld mutations, no crash (%.1f s)\n", name.c_str(), seeds.size(),
              runs, seconds);
  return 0;
}
