// The job file's pipeline keys come from one table (job_spec_parse.cc): the keys train-local's
// parse accepts beyond its own are exactly the table's names (PipelineJobKeys()), each of them
// read by the daemon's parser, and a misspelled one is refused by both, naming it.
#include <catch2/catch.hpp>
#include <set>
#include <string>

#include "daemon/job/spec/job_spec.h"
#include "model/job.h"

namespace longhaul::daemon {
namespace {

using Catch::Matchers::Contains;

const std::string kHead =
    "name: k\nmodel: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}\n"
    "data: {train: builtin}\nsteps: 4\nbatch_size: 2\n";

TEST_CASE("train-local accepts beyond its own keys exactly the table's pipeline keys",
          "[job][keys]") {
  const auto keys = PipelineJobKeys();
  REQUIRE_FALSE(keys.empty());
  CHECK(std::set<absl::string_view>(keys.begin(), keys.end()).size() == keys.size());
  for (absl::string_view key : keys) {
    const std::string name(key);
    INFO(name);
    // A value no parser takes: train-local ignores it, the daemon's parser of the key refuses
    // it, naming the key (so every name in the list is one the daemon reads).
    std::string text = kHead + name + ": {not_a_field: 1}\n";
    if (name != "sites") text += "sites: [a, b]\n";
    auto local = model::ParseJob(text, "job.yaml", "/base", keys);  // as train-local reads it
    CHECK(local.ok());
    auto plain = model::ParseJob(text, "job.yaml", "/base");  // train-local's own keys only
    REQUIRE_FALSE(plain.ok());
    CHECK_THAT(std::string(plain.status().message()),
               Contains(": " + name + ": unknown key '" + name + "'"));
    auto spec = ParseJobSpec(text, "job.yaml", "/base");
    REQUIRE_FALSE(spec.ok());
    CHECK_THAT(std::string(spec.status().message()), Contains("job.yaml:6:"));
    CHECK_THAT(std::string(spec.status().message()), Contains(": " + name));
  }
}

TEST_CASE("a misspelled pipeline key is refused, naming it", "[job][keys]") {
  const std::string text = kHead + "sites: [a, b]\nreplicass: 2\n";
  const std::string want =
      "job.yaml:7:1: replicass: unknown key 'replicass' (did you mean "
      "'replicas'?)";
  auto local = model::ParseJob(text, "job.yaml", "/base", PipelineJobKeys());
  REQUIRE_FALSE(local.ok());
  CHECK(std::string(local.status().message()) == want);
  auto spec = ParseJobSpec(text, "job.yaml", "/base");
  REQUIRE_FALSE(spec.ok());
  CHECK(std::string(spec.status().message()) == want);
}

}  // namespace
}  // namespace longhaul::daemon
