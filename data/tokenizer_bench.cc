// Tokenizer throughput: longhaul's C++ tokenizers against js-tiktoken (the npm port of
// OpenAI's tiktoken) and @huggingface/tokenizers (Hugging Face's JavaScript tokenizer.json
// implementation) on the same text in the same run, one core each. Rounds alternate the sides
// so all see the same machine; each side encodes the whole text as one string repeatedly for
// --seconds after a warm-up, and the best and median of all timed runs are reported.
//
// The C++ tiktoken tokenizer is timed twice per round: with its piece cache emptied before
// each run (the cache fills as the run goes, as it would on new text) and with the cache off.
// The C++ tokenizer.json tokenizer (HfTokenizer) is timed with its cache emptied before each
// run, on a tokenizer.json converted from the same ranks (GPT-2's form for gpt2, Llama 3's for
// cl100k_base; test/data/npm/hf_tokenizers.mjs), which gives the same ids. js-tiktoken has no
// cache; @huggingface/tokenizers' cache is its own. The text is data/sample_text.h's English
// prose (with multilingual lines mixed in with --mixed) unless --text names a file; the rank
// files come from js-tiktoken's own ranks (test/data/npm/js_tiktoken.mjs ranks).
//
//   bazel build //data:tokenizer_bench && bazel-bin/data/tokenizer_bench   (from the repo root)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "data/hf_tokenizer.h"
#include "data/sample_text.h"
#include "data/tiktoken_tokenizer.h"

namespace longhaul::data {
namespace {

struct Flags {
  std::string encodings = "gpt2,cl100k_base";
  std::string text_file;  // empty: generated English prose
  bool mixed = false;     // generated prose with multilingual lines (MixedSampleText)
  size_t bytes = size_t{1} << 20;
  double seconds = 2.0;
  int rounds = 3;
  std::string js = "test/data/npm/js_tiktoken.mjs";
  std::string hf_js = "test/data/npm/hf_tokenizers.mjs";
  bool run_js = true;
  bool run_hf = true;
  std::string workdir;
};

struct Timing {
  std::vector<double> seconds;  // every timed run, all rounds
  double Best() const { return *std::min_element(seconds.begin(), seconds.end()); }
  double Median() const {
    std::vector<double> s = seconds;
    std::sort(s.begin(), s.end());
    return s[s.size() / 2];
  }
};

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "tokenizer_bench: cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string RunCommand(const std::string& cmd) {
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    std::fprintf(stderr, "tokenizer_bench: cannot run %s\n", cmd.c_str());
    std::exit(1);
  }
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  if (::pclose(pipe) != 0) {
    std::fprintf(stderr, "tokenizer_bench: failed: %s\n%s", cmd.c_str(), out.c_str());
    std::exit(1);
  }
  return out;
}

// Times encoding `text` for at least `seconds` (3 runs at least) onto `timing`; returns the
// round's best seconds. `T` is TiktokenTokenizer or HfTokenizer.
template <typename T>
double TimeCpp(const T& t, const std::string& text, double seconds, bool cold, Timing* timing) {
  std::vector<TokenId> ids;
  ids.reserve(text.size());
  double total = 0, best = 1e300;
  int runs = 0;
  while (total < seconds || runs < 3) {
    ids.clear();
    if (cold) t.ResetPieceCache();
    const double start = Now();
    const Status status = t.EncodeTo(text, {}, &ids);
    const double elapsed = Now() - start;
    if (!status.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", status.ToString().c_str());
      std::exit(1);
    }
    timing->seconds.push_back(elapsed);
    total += elapsed;
    best = std::min(best, elapsed);
    ++runs;
  }
  return best;
}

int Main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Tokenizer throughput: longhaul's C++ tiktoken against js-tiktoken, one core each"};
  app.add_option("--encodings", f.encodings, "Comma-separated: gpt2, cl100k_base");
  app.add_option("--text", f.text_file, "UTF-8 text file to encode (default: generated prose)");
  app.add_flag("--mixed", f.mixed, "Generate prose with multilingual and emoji lines mixed in");
  app.add_option("--bytes", f.bytes, "Size of the generated text")->check(CLI::PositiveNumber);
  app.add_option("--seconds", f.seconds, "Timed seconds per side per round")
      ->check(CLI::PositiveNumber);
  app.add_option("--rounds", f.rounds, "Rounds (C++ then js-tiktoken)")->check(CLI::PositiveNumber);
  app.add_option("--js", f.js, "Path of js_tiktoken.mjs");
  app.add_option("--hf-js", f.hf_js, "Path of hf_tokenizers.mjs");
  app.add_flag("--run-js,!--no-js", f.run_js,
               "Also time js-tiktoken (and @huggingface/tokenizers with --hf)");
  app.add_flag("--hf,!--no-hf", f.run_hf,
               "Also time the tokenizer.json tokenizer on a file converted from the ranks");
  app.add_option("--workdir", f.workdir, "Where rank files and the text go (default: a temp dir)");
  std::string write_text;
  app.add_option("--write-text", write_text,
                 "Only write the generated text (--bytes, --mixed) to this file, for other "
                 "benchmarks (tools/bench/prepare_bench.sh)");
  CLI11_PARSE(app, argc, argv);
  if (!write_text.empty()) {
    std::ofstream out(write_text, std::ios::binary);
    out << (f.mixed ? MixedSampleText(1, f.bytes) : EnglishSampleText(1, f.bytes));
    return out.good() ? 0 : 1;
  }

  if (f.workdir.empty()) {
    char dir[] = "/tmp/tokenizer_bench.XXXXXX";
    if (::mkdtemp(dir) == nullptr) {
      std::perror("tokenizer_bench: mkdtemp");
      return 1;
    }
    f.workdir = dir;
  }
  RunCommand(absl::StrCat("node ", f.js, " ranks ", f.workdir, " 2>&1"));
  if (f.run_hf) {
    RunCommand(
        absl::StrCat("node ", f.hf_js, " tokenizer-json ", f.workdir, " ", f.workdir, " 2>&1"));
  }
  std::string text_path = f.text_file;
  if (text_path.empty()) {
    text_path = f.workdir + "/text.txt";
    std::ofstream(text_path, std::ios::binary)
        << (f.mixed ? MixedSampleText(1, f.bytes) : EnglishSampleText(1, f.bytes));
  }
  const std::string text = ReadFile(text_path);
  std::printf("text: %s, %zu bytes; %d rounds of %.1f s per side; one thread\n", text_path.c_str(),
              text.size(), f.rounds, f.seconds);

  for (absl::string_view name_view : absl::StrSplit(f.encodings, ',', absl::SkipEmpty())) {
    const std::string name(name_view.data(), name_view.size());
    auto encoding = TiktokenEncodingByName(name);
    if (!encoding.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n", encoding.status().ToString().c_str());
      return 1;
    }
    const double load_start = Now();
    auto cached = TiktokenTokenizer::Load(f.workdir + "/" + name + ".tiktoken", *encoding);
    const double load_seconds = Now() - load_start;
    TiktokenOptions no_cache_options;
    no_cache_options.piece_cache_entries = 0;
    auto uncached =
        TiktokenTokenizer::Load(f.workdir + "/" + name + ".tiktoken", *encoding, no_cache_options);
    if (!cached.ok() || !uncached.ok()) {
      std::fprintf(stderr, "tokenizer_bench: %s\n",
                   (cached.ok() ? uncached.status() : cached.status()).ToString().c_str());
      return 1;
    }
    // Warm-up, and a check that the text survives the round trip.
    const std::vector<TokenId> ids = (*cached)->Encode(text).value();
    if ((*cached)->Decode(ids).value() != text) {
      std::fprintf(stderr, "tokenizer_bench: %s: decode(encode(text)) != text\n", name.c_str());
      return 1;
    }
    std::unique_ptr<HfTokenizer> hf;
    double hf_load_seconds = 0;
    const std::string hf_path = f.workdir + "/" + name + ".tokenizer.json";
    if (f.run_hf) {
      const double hf_load_start = Now();
      auto loaded = HfTokenizer::Load(hf_path);
      hf_load_seconds = Now() - hf_load_start;
      if (!loaded.ok()) {
        std::fprintf(stderr, "tokenizer_bench: %s\n", loaded.status().ToString().c_str());
        return 1;
      }
      hf = std::move(loaded).value();
      if (hf->Encode(text).value() != ids) {
        std::fprintf(stderr, "tokenizer_bench: %s: HfTokenizer's ids differ from tiktoken's\n",
                     name.c_str());
        return 1;
      }
    }
    Timing cold, off, hf_cold, js, hf_js;
    size_t js_tokens = 0, hf_js_tokens = 0;
    // Runs a node bench command, adding its runs to `timing`; returns its token count and
    // prints its best tokens/s.
    auto node_bench = [&](const char* what, const std::string& args, Timing* timing) {
      const nlohmann::json r = nlohmann::json::parse(RunCommand(absl::StrCat("node ", args)));
      for (const auto& seconds : r["seconds"]) timing->seconds.push_back(seconds.get<double>());
      const size_t tokens = r["tokens"].get<size_t>();
      std::printf(", %s %.0f", what, double(tokens) / r["best_seconds"].get<double>());
      return tokens;
    };
    for (int round = 0; round < f.rounds; ++round) {
      const double cpp_best = TimeCpp(**cached, text, f.seconds, /*cold=*/true, &cold);
      TimeCpp(**uncached, text, f.seconds, /*cold=*/false, &off);
      const double hf_best =
          hf != nullptr ? TimeCpp(*hf, text, f.seconds, /*cold=*/true, &hf_cold) : 0;
      std::printf("  %s round %d: C++ tiktoken best %.0f tokens/s", name.c_str(), round + 1,
                  double(ids.size()) / cpp_best);
      if (hf != nullptr) std::printf(", C++ tokenizer.json %.0f", double(ids.size()) / hf_best);
      if (f.run_js) {
        js_tokens =
            node_bench("js-tiktoken",
                       absl::StrCat(f.js, " bench ", name, " ", text_path, " ", f.seconds), &js);
        if (hf != nullptr) {
          hf_js_tokens = node_bench(
              "@huggingface/tokenizers",
              absl::StrCat(f.hf_js, " bench ", hf_path, " ", text_path, " ", f.seconds), &hf_js);
        }
      }
      std::printf("\n");
    }
    const double n = double(ids.size());
    std::printf("%s: %zu tokens (%.2f bytes/token), rank file loaded in %.2f s", name.c_str(),
                ids.size(), double(text.size()) / n, load_seconds);
    if (hf != nullptr) std::printf(", tokenizer.json in %.2f s", hf_load_seconds);
    std::printf("\n");
    auto line = [&](const char* what, const Timing& t) {
      std::printf("  %-44s best %.3f s = %.0f tokens/s (%.1f MB/s), median %.0f tokens/s\n", what,
                  t.Best(), n / t.Best(), text.size() / t.Best() / 1e6, n / t.Median());
    };
    line("C++ tiktoken, cache emptied before each run:", cold);
    line("C++ tiktoken, no piece cache:", off);
    if (hf != nullptr) line("C++ tokenizer.json, cache emptied each run:", hf_cold);
    if (f.run_js) {
      if (js_tokens != ids.size()) {
        std::printf("  WARNING: js-tiktoken counted %zu tokens, C++ %zu\n", js_tokens, ids.size());
      }
      line("js-tiktoken:", js);
      std::printf(
          "  ratio C++ tiktoken / js-tiktoken: best %.2fx with the cache, %.2fx without; "
          "median %.2fx with the cache, %.2fx without\n",
          js.Best() / cold.Best(), js.Best() / off.Best(), js.Median() / cold.Median(),
          js.Median() / off.Median());
      if (hf != nullptr) {
        if (hf_js_tokens != ids.size()) {
          std::printf("  WARNING: @huggingface/tokenizers counted %zu tokens, C++ %zu\n",
                      hf_js_tokens, ids.size());
        }
        line("@huggingface/tokenizers:", hf_js);
        std::printf(
            "  ratio C++ tokenizer.json / @huggingface/tokenizers: best %.2fx, median %.2fx\n",
            hf_js.Best() / hf_cold.Best(), hf_js.Median() / hf_cold.Median());
      }
    }
    if (hf != nullptr) {
      std::printf(
          "  ratio C++ tokenizer.json / C++ tiktoken (both cache emptied): best %.2fx, "
          "median %.2fx\n",
          cold.Best() / hf_cold.Best(), cold.Median() / hf_cold.Median());
    }
  }
  return 0;
}

}  // namespace
}  // namespace longhaul::data

int main(int argc, char** argv) { return longhaul::data::Main(argc, argv); }
