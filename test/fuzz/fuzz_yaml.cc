// Fuzz target: the site config and job YAML parsers (daemon/config.h, daemon/job/job_spec.h).
// The first byte picks the parser. Invariants: no crash, no exception escapes, and every
// refusal names the source ("fuzz.yaml:...").
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "daemon/job/job_spec.h"

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

extern "C" void LonghaulFuzzSeeds(std::vector<std::string>* seeds) {
  // Deep nesting: a recursive parser must not overflow its stack on a peer's job file.
  seeds->push_back("\x01" + std::string(20000, '['));
  seeds->push_back("\x00" + std::string(20000, '{'));
  // Deep block nesting (about 20 KiB; texts over 256 KiB are refused before parsing).
  std::string deep = "\x01name: x\nmodel:\n";
  for (int i = 0; i < 200; ++i) deep += std::string(i + 2, ' ') + "- a:\n";
  seeds->push_back(deep);
}
