// The durable-file shape (model/durable_file.h) through the FileEnv a caller passes, with the
// fault env of the durability tests: a round trip; a torn, truncated, overlong, flipped or
// foreign file is DataLoss naming the file and never a payload; an fsync that fails or a disk
// that fills leaves the previous file whole; and the bytes are the job record's of old (the
// shape had that layout before it had a name).
#include "model/durable_file.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/job/coordinator/job_record.h"
#include "test/daemon/fault_env.h"
#include "test/daemon/test_util.h"

namespace longhaul {
namespace {

constexpr model::DurableFormat kFormat{
    {'L', 'H', 'T', 'E', 'S', 'T', 'F', 'M'}, 2, 1 << 20, "test file"};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void Spill(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST_CASE("durable files: round trip and every corruption refused", "[durable]") {
  testing::FaultEnv env;
  const std::string path = testing::TempDir("durable") + "/f.bin";
  REQUIRE(model::WriteDurableFile(env, path, kFormat, {"hello ", "", "world"}).ok());
  auto back = model::ReadDurableFile(env, path, kFormat);
  REQUIRE(back.ok());
  CHECK(back->bytes == "hello world");
  CHECK(back->version == 2);
  const std::string bytes = Slurp(path);
  CHECK(model::HasDurableMagic(bytes, kFormat));
  REQUIRE(bytes.size() == model::kDurableHeaderBytes + 11);

  auto refused = [&](const std::string& what) {
    const auto r = model::ReadDurableFile(env, path, kFormat);
    INFO(what << ": " << r.status().ToString());
    CHECK(absl::IsDataLoss(r.status()));
    CHECK(std::string(r.status().message()).find(path) != std::string::npos);
  };
  Spill(path, bytes.substr(0, bytes.size() - 1));
  refused("torn payload");
  Spill(path, bytes.substr(0, 20));
  refused("torn header");
  Spill(path, bytes + "x");
  refused("overlong");
  for (size_t at : {size_t{0}, size_t{8}, size_t{12}, size_t{16}, size_t{24}, size_t{35}}) {
    std::string flipped = bytes;
    flipped[at] ^= 0x10;
    Spill(path, flipped);
    refused("byte " + std::to_string(at) + " flipped");
  }
  // A version this build does not know, and a payload above the format's limit.
  model::DurableFormat newer = kFormat;
  newer.version = 3;
  REQUIRE(model::WriteDurableFile(env, path, newer, {"x"}).ok());
  refused("version 3");
  model::DurableFormat small = kFormat;
  small.max_bytes = 4;
  REQUIRE(model::WriteDurableFile(env, path, kFormat, {"hello world"}).ok());
  CHECK(absl::IsDataLoss(model::ReadDurableFile(env, path, small).status()));
  CHECK(absl::IsInvalidArgument(model::WriteDurableFile(env, path, small, {"hello world"})));
  // A flip on the way back from the disk (the env's, not the file's).
  env.FlipOnRead("f.bin", 40);
  refused("flipped on read");
  env.FlipOnRead("", -1);
  CHECK(absl::IsNotFound(model::ReadDurableFile(env, path + ".none", kFormat).status()));
}

TEST_CASE("durable files: a failed write leaves the previous file whole", "[durable]") {
  testing::FaultEnv env;
  const std::string path = testing::TempDir("durable_fail") + "/f.bin";
  REQUIRE(model::WriteDurableFile(env, path, kFormat, {"first"}).ok());
  env.fail_sync = true;
  CHECK_FALSE(model::WriteDurableFile(env, path, kFormat, {"second"}).ok());
  env.fail_sync = false;
  env.space_left = 10;  // the disk fills inside the header
  CHECK(absl::IsResourceExhausted(model::WriteDurableFile(env, path, kFormat, {"third"})));
  env.space_left = -1;
  auto back = model::ReadDurableFile(env, path, kFormat);
  REQUIRE(back.ok());
  CHECK(back->bytes == "first");
  // No temporary file left beside it.
  int files = 0;
  for (const auto& e :
       std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) {
    (void)e;
    ++files;
  }
  CHECK(files == 1);
}

TEST_CASE("a job record is a durable file of format LHJOBREC", "[durable]") {
  const std::string path = testing::TempDir("durable_record") + "/job.pb";
  v1::JobStatus record;
  record.set_job_id("j-000007");
  REQUIRE(daemon::WriteJobRecord(*FileEnv::Default(), path, record).ok());
  constexpr model::DurableFormat kRecord{
      {'L', 'H', 'J', 'O', 'B', 'R', 'E', 'C'}, 1, 1 << 20, "job record"};
  auto back = model::ReadDurableFile(*FileEnv::Default(), path, kRecord);
  REQUIRE(back.ok());
  CHECK(back->bytes == record.SerializeAsString());
  // An earlier build's bare protobuf still loads.
  Spill(path, record.SerializeAsString());
  auto old = daemon::ReadJobRecord(*FileEnv::Default(), path);
  REQUIRE(old.ok());
  CHECK(old->job_id() == "j-000007");
}

}  // namespace
}  // namespace longhaul
