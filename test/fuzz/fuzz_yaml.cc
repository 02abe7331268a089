// Fuzz target: the site config and job YAML parsers (daemon/config.h, daemon/job/spec/job_spec.h).
// The first byte picks the parser. Invariants: no crash, no exception escapes, and every
// refusal names the source ("fuzz.yaml:...").
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/job/spec/job_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    auto c = longhaul::daemon::ParseSiteConfig(text, "fuzz.yaml", "/nonexistent-fuzz-dir");
    if (c.ok() && (c->site.empty() || c->data_roots.empty())) std::abort();
    if (!c.ok() && std::string(c.status().message()).rfind("fuzz.yaml", 0) != 0) std::abort();
  } else {
    auto j = longhaul::daemon::ParseJobSpec(text, "fuzz.yaml", "/nonexistent-fuzz-dir");
    if (j.ok() && (j->job.steps < 1 || j->job.batch_size < 1)) std::abort();
  }
  return 0;
}

namespace {

// A seed for one parser: the selector byte, then the YAML text. (A string literal cannot
// start a seed with the site parser's selector: "\x00" + text is just text.)
constexpr char kSiteParser = 0;
constexpr char kJobParser = 1;
std::string Seed(char parser, const std::string& text) { return std::string(1, parser) + text; }

}  // namespace

extern "C" void LonghaulFuzzSeeds(std::vector<std::string>* seeds) {
  const size_t first = seeds->size();
  // Deep nesting: a recursive parser must not overflow its stack on a peer's job file or on
  // a site config.
  seeds->push_back(Seed(kJobParser, std::string(20000, '[')));
  seeds->push_back(Seed(kSiteParser, std::string(20000, '{')));
  // Deep block nesting (about 20 KiB; texts over 256 KiB are refused before parsing).
  std::string deep = "name: x\nmodel:\n";
  for (int i = 0; i < 200; ++i) deep += std::string(i + 2, ' ') + "- a:\n";
  seeds->push_back(Seed(kJobParser, deep));
  // Every code seed starts with a parser's selector byte (the site config's deep nesting
  // once lost its selector and went to the job parser as "{{{...").
  for (size_t i = first; i < seeds->size(); ++i) {
    const char selector = (*seeds)[i][0];
    if (selector != kSiteParser && selector != kJobParser) {
      std::fprintf(stderr, "fuzz_yaml: code seed %zu starts with byte %d, not a parser's\n",
                   i - first, selector);
      std::abort();
    }
  }
}
