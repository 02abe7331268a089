// The driver of longhaul's fuzz targets. Each target defines LLVMFuzzerTestOneInput, as
// libFuzzer wants, and may define LonghaulFuzzSeeds to add valid inputs built in code. The
// seeds are the committed corpus in test/fuzz/corpus/TARGET and those of the code.
//
// Two modes, one per compiler:
// - Built with LONGHAUL_LIBFUZZER (--config=asan: clang, libFuzzer, ASan, UBSan; CI runs it):
//   LLVMFuzzerInitialize writes the seeds into a fresh corpus directory and hands libFuzzer a
//   fixed -runs and -seed, so a CI run is bounded and repeatable while the search is
//   coverage-guided. Extra arguments pass through to libFuzzer, for example
//   `bazel-bin/test/fuzz/fuzz_yaml -max_total_time=600 -runs=-1` to fuzz longer.
// - Otherwise (gcc, the ordinary test build): main runs the seeds, then a fixed number of
//   seeded random mutations of them (bit flips, byte sets, inserts, deletes, duplicated and
//   spliced ranges, boundary values).
// Any crash, sanitizer report or failed invariant (the target aborts) fails the test.
//
// Environment: LONGHAUL_FUZZ_RUNS (inputs to try; default 20000), LONGHAUL_FUZZ_SEED (default
// 1). Arguments in the gcc mode: corpus directories (default: test/fuzz/corpus/<binary name>).
// Every target has a committed corpus: a corpus directory that is missing or empty fails the
// run rather than fuzzing from nothing.
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

#ifndef LONGHAUL_LIBFUZZER

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

#endif  // LONGHAUL_LIBFUZZER

}  // namespace

namespace {

// The seeds: every file of each corpus directory, then the code's. A corpus directory that
// is missing or holds no file is an error (exit 2), not an empty corpus: under Bazel it means
// the target's `data` lost its corpus glob, or the corpus its path.
std::vector<std::string> LoadSeeds(const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  std::vector<std::string> seeds;
  for (const auto& dir : dirs) {
    std::error_code ec;
    size_t files = 0;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      if (!in) {
        std::fprintf(stderr, "fuzz_main: cannot read corpus file %s\n", e.path().c_str());
        std::exit(2);
      }
      seeds.push_back(ss.str().substr(0, kMaxLen));
      ++files;
    }
    if (ec) {
      std::fprintf(stderr, "fuzz_main: cannot read corpus directory %s: %s\n", dir.c_str(),
                   ec.message().c_str());
      std::exit(2);
    }
    if (files == 0) {
      std::fprintf(stderr, "fuzz_main: corpus directory %s holds no file\n", dir.c_str());
      std::exit(2);
    }
  }
  if (LonghaulFuzzSeeds) LonghaulFuzzSeeds(&seeds);
  return seeds;
}

long RunsFromEnv() {
  const char* runs_env = std::getenv("LONGHAUL_FUZZ_RUNS");
  return runs_env ? std::atol(runs_env) : 20000;
}

uint64_t SeedFromEnv() {
  const char* seed_env = std::getenv("LONGHAUL_FUZZ_SEED");
  return seed_env ? std::strtoull(seed_env, nullptr, 10) : 1;
}

}  // namespace

#ifdef LONGHAUL_LIBFUZZER

namespace {

struct LibFuzzerArgs {
  std::vector<std::string> args;
  std::vector<char*> argv;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  namespace fs = std::filesystem;
  const std::string name = fs::path((*argv)[0]).filename().string();
  const std::vector<std::string> seeds = LoadSeeds({"test/fuzz/corpus/" + name});
  const long runs = RunsFromEnv();
  static LibFuzzerArgs args_storage;  // libFuzzer keeps pointers into it until exit
  LibFuzzerArgs* run = &args_storage;
  auto& a = run->args;
  a.push_back((*argv)[0]);
  a.push_back("-runs=" + std::to_string(runs));
  a.push_back("-seed=" + std::to_string(SeedFromEnv()));
  a.push_back("-timeout=60");
  a.push_back("-rss_limit_mb=4096");
  a.push_back("-print_final_stats=1");
  // Under bazel test, a crashing or slow input is kept in the test's outputs.
  if (const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR")) {
    a.push_back(std::string("-artifact_prefix=") + out + "/");
  }
  bool inputs_given = false;
  for (int i = 1; i < *argc; ++i) {  // the caller's flags win; its files replace the corpus
    a.push_back((*argv)[i]);
    if ((*argv)[i][0] != '-') inputs_given = true;
  }
  if (!inputs_given) {
    // The seeds go into a fresh directory, so what libFuzzer adds never lands in the tree.
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string dir = std::string(tmp ? tmp : "/tmp") + "/" + name + ".XXXXXX";
    if (mkdtemp(dir.data()) == nullptr) {
      std::perror("fuzz_main: mkdtemp");
      std::exit(2);
    }
    for (size_t i = 0; i < seeds.size(); ++i) {
      std::ofstream out(dir + "/seed" + std::to_string(i), std::ios::binary);
      out.write(seeds[i].data(), static_cast<std::streamsize>(seeds[i].size()));
    }
    a.push_back(dir);
    std::printf("%s: libFuzzer over %zu seeds, %ld runs\n", name.c_str(), seeds.size(), runs);
    std::fflush(stdout);
  }
  for (auto& s : a) run->argv.push_back(s.data());
  run->argv.push_back(nullptr);
  *argc = static_cast<int>(a.size());
  *argv = run->argv.data();
  return 0;
}

#else

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const std::string name = fs::path(argv[0]).filename().string();
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) dirs.push_back(argv[i]);
  if (dirs.empty()) dirs.push_back("test/fuzz/corpus/" + name);
  const std::vector<std::string> seeds = LoadSeeds(dirs);
  const long runs = RunsFromEnv();
  std::mt19937_64 rng(SeedFromEnv());
  const auto start = std::chrono::steady_clock::now();
  for (const auto& s : seeds) Run(s);
  for (long i = 0; i < runs; ++i) Run(Mutate(seeds[rng() % seeds.size()], seeds, rng));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu seeds and %ld mutations, no crash (%.1f s)\n", name.c_str(), seeds.size(),
              runs, seconds);
  return 0;
}

#endif  // LONGHAUL_LIBFUZZER
