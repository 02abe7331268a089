// One rule for relative paths in a job file (model/job_file_paths.h): relative to the job
// file's folder. submit's rewrite must name the same files train-local reads, keep every line
// where it was, and a daemon (no folder) must refuse what is still relative.
#include "model/job_file_paths.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/job.h"
#include "test/model/test_util.h"

namespace longhaul::model {
namespace {

using Catch::Matchers::Contains;

const char kHead[] =
    "name: t\nmodel: {layers: 1, channels: 16, heads: 2, vocab: 256, context: 8}\n"
    "steps: 1\nbatch_size: 1\n";

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

TEST_CASE("submit's rewrite names the files train-local reads", "[job][paths]") {
  const std::string dir = testing::TempDir("job_file_paths");
  std::filesystem::create_directories(dir + "/data/sub dir");
  Write(dir + "/data/a.txt", std::string(64, 'a'));
  Write(dir + "/data/sub dir/b'c.txt", std::string(64, 'b'));
  for (const std::string& data :
       {std::string("data: {train: data/a.txt, val: builtin}\n"),
        std::string("data:\n  train: 'data/sub dir/b''c.txt'   # quoted, with a quote\n"
                    "  val: \"data/a.txt\"\n  format: text\n"),
        std::string(
            "data: {train: ./data/../data/a.txt, format: text}\ncheckpoint: {dir: ck}\n")}) {
    CAPTURE(data);
    const std::string text = std::string(kHead) + data;
    Write(dir + "/job.yaml", text);
    auto local = LoadJob(dir + "/job.yaml");  // train-local's reading
    REQUIRE(local.ok());
    auto sent = AbsoluteJobPaths(text, "job.yaml", dir);
    REQUIRE(sent.ok());
    CHECK(std::count(sent->begin(), sent->end(), '\n') ==
          std::count(text.begin(), text.end(), '\n'));
    auto daemon = ParseJob(*sent, "job.yaml", "");  // a daemon's reading: no folder
    REQUIRE(daemon.ok());
    CHECK(daemon->data.train == local->data.train);
    CHECK(daemon->data.val == local->data.val);
    CHECK(daemon->checkpoint.dir == local->checkpoint.dir);
    CHECK(daemon->data.train.rfind(dir, 0) == 0);
  }
}

TEST_CASE("absolute paths, builtin and a file without paths are kept byte for byte",
          "[job][paths]") {
  for (const std::string& text :
       {std::string(kHead), std::string(kHead) + "data: {train: builtin, val: builtin}\n",
        std::string(kHead) + "data: {train: /srv/data/a.bin}\n", std::string("- a list\n")}) {
    auto sent = AbsoluteJobPaths(text, "job.yaml", "/home/u/jobs");
    REQUIRE(sent.ok());
    CHECK(*sent == text);
  }
}

TEST_CASE("a path that cannot be rewritten in place is an error naming where", "[job][paths]") {
  const std::string alias = std::string(kHead) + "x: &p data/a.bin\ndata: {train: *p}\n";
  auto sent = AbsoluteJobPaths(alias, "job.yaml", "/home/u/jobs");
  REQUIRE_FALSE(sent.ok());
  CHECK_THAT(std::string(sent.status().message()), Contains("job.yaml:"));
  CHECK_THAT(std::string(sent.status().message()), Contains("data.train"));
  auto bad = AbsoluteJobPaths("a: [\n", "job.yaml", "/d");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Contains("invalid YAML"));
}

TEST_CASE("a daemon refuses a relative path, saying the rule", "[job][paths]") {
  for (const std::string& key :
       {std::string("data: {train: a.bin}\n"), std::string("data: {train: builtin, val: v.bin}\n"),
        std::string("init_from: model.bin\n")}) {
    auto job = ParseJob(std::string(kHead) + key, "job x", "");
    REQUIRE_FALSE(job.ok());
    CHECK_THAT(std::string(job.status().message()), Contains("relative path"));
    CHECK_THAT(std::string(job.status().message()), Contains("job file's folder"));
  }
}

TEST_CASE("submit's rewrite names a mixture's manifests as train-local reads them",
          "[job][paths]") {
  const std::string dir = testing::TempDir("job_file_paths_mixture");
  for (const char* m : {"a", "b"}) {
    std::filesystem::create_directories(dir + "/data/" + m);
    Write(dir + "/data/" + m + "/manifest.json", "{}");
  }
  const std::string text = std::string(kHead) +
                           "data:\n  train:\n    - {manifest: data/a, weight: 2}\n"
                           "    - manifest: ./data/b/manifest.json\n";
  Write(dir + "/job.yaml", text);
  auto local = LoadJob(dir + "/job.yaml");
  REQUIRE(local.ok());
  auto sent = AbsoluteJobPaths(text, "job.yaml", dir);
  REQUIRE(sent.ok());
  auto daemon = ParseJob(*sent, "job.yaml", "");
  INFO(*sent);
  REQUIRE(daemon.ok());
  REQUIRE(daemon->data.mixture.size() == 2);
  CHECK(daemon->data.mixture[0].manifest == dir + "/data/a");
  CHECK(daemon->data.mixture[1].manifest == dir + "/data/b/manifest.json");
  CHECK(daemon->data.mixture[1].manifest == local->data.mixture[1].manifest);
  CHECK(daemon->data.mixture[0].weight == 2);
}

}  // namespace
}  // namespace longhaul::model
