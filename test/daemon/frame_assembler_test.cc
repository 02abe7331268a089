// FrameAssembler: whole tensors out of chunked frames, and every way a stream can be wrong
// refused with its code before anything is buffered or delivered.
#include "daemon/transport/frame_assembler.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace longhaul::daemon {
using transport::FrameAssembler;

namespace {

// The chunks of one tensor of `bytes` bytes cut every `cut` bytes.
std::vector<v1::TensorFrame> Chunks(const std::string& job, const std::string& tensor, size_t cut) {
  std::vector<v1::TensorFrame> out;
  const uint32_t count = static_cast<uint32_t>((tensor.size() + cut - 1) / cut);
  for (uint32_t i = 0; i < count; ++i) {
    v1::TensorFrame f;
    f.set_job_id(job);
    if (i == 0) {
      f.set_encoded_size(tensor.size());
      f.set_chunk_count(count);
      f.set_step(7);
    }
    f.set_chunk_index(i);
    f.set_chunk_offset(uint64_t{i} * cut);
    f.set_payload(tensor.substr(i * cut, cut));
    out.push_back(f);
  }
  return out;
}

struct Sink {
  int admitted = 0;
  std::vector<std::string> delivered;
  Status refuse = absl::OkStatus();
  FrameAssembler Make() {
    return FrameAssembler(
        [this](const v1::TensorFrame&) {
          ++admitted;
          return refuse;
        },
        [this](const v1::TensorFrame& first, std::vector<uint8_t> payload) {
          CHECK(first.payload().empty());
          CHECK(first.step() == 7);
          delivered.emplace_back(payload.begin(), payload.end());
          return absl::OkStatus();
        });
  }
};

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 31 + 7);
  return s;
}

TEST_CASE("frame assembler: tensors in chunks arrive whole, one after another") {
  Sink sink;
  FrameAssembler a = sink.Make();
  const std::string t1 = Pattern(1000), t2 = Pattern(64);
  for (const auto& f : Chunks("j", t1, 300)) REQUIRE(a.Add(f).ok());
  for (const auto& f : Chunks("j", t2, 64)) REQUIRE(a.Add(f).ok());
  REQUIRE(a.Finish().ok());
  CHECK(sink.admitted == 2);
  REQUIRE(sink.delivered.size() == 2);
  CHECK(sink.delivered[0] == t1);
  CHECK(sink.delivered[1] == t2);
  CHECK(a.frames() == 5);
  CHECK(a.bytes() == 1064);
}

TEST_CASE("frame assembler: a tensor announcing no chunks, or far too many, is refused") {
  for (uint32_t count : {0u, 17u, 1u << 30}) {
    Sink sink;
    FrameAssembler a = sink.Make();
    v1::TensorFrame f = Chunks("j", Pattern(100), 100)[0];
    f.set_chunk_count(count);
    const Status s = a.Add(f);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(sink.admitted == 0);  // refused before admission
  }
}

TEST_CASE("frame assembler: an empty tensor is one empty chunk") {
  Sink sink;
  FrameAssembler a = sink.Make();
  v1::TensorFrame f;
  f.set_job_id("j");
  f.set_chunk_count(1);
  f.set_step(7);
  REQUIRE(a.Add(f).ok());
  REQUIRE(sink.delivered.size() == 1);
  CHECK(sink.delivered[0].empty());
}

TEST_CASE("frame assembler: admit's refusal ends the stream before any buffering") {
  Sink sink;
  sink.refuse = absl::PermissionDeniedError("not your job");
  FrameAssembler a = sink.Make();
  const Status s = a.Add(Chunks("j", Pattern(100), 40)[0]);
  CHECK(s.code() == absl::StatusCode::kPermissionDenied);
  CHECK(sink.delivered.empty());
}

TEST_CASE("frame assembler: chunks out of sequence, at a wrong offset or past the size") {
  const std::string t = Pattern(100);
  auto chunks = Chunks("j", t, 40);
  SECTION("a tensor that starts at chunk 1") {
    Sink sink;
    FrameAssembler a = sink.Make();
    CHECK(a.Add(chunks[1]).code() == absl::StatusCode::kInvalidArgument);
    CHECK(sink.admitted == 0);
  }
  SECTION("a chunk skipped") {
    Sink sink;
    FrameAssembler a = sink.Make();
    REQUIRE(a.Add(chunks[0]).ok());
    CHECK(a.Add(chunks[2]).code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("a chunk at the wrong offset") {
    Sink sink;
    FrameAssembler a = sink.Make();
    REQUIRE(a.Add(chunks[0]).ok());
    chunks[1].set_chunk_offset(41);
    CHECK(a.Add(chunks[1]).code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("a chunk of another job mid-tensor") {
    Sink sink;
    FrameAssembler a = sink.Make();
    REQUIRE(a.Add(chunks[0]).ok());
    chunks[1].set_job_id("k");
    CHECK(a.Add(chunks[1]).code() == absl::StatusCode::kInvalidArgument);
  }
  SECTION("more bytes than announced") {
    Sink sink;
    FrameAssembler a = sink.Make();
    REQUIRE(a.Add(chunks[0]).ok());
    REQUIRE(a.Add(chunks[1]).ok());
    chunks[2].set_payload(std::string(21, 'x'));
    CHECK(a.Add(chunks[2]).code() == absl::StatusCode::kInvalidArgument);
    CHECK(sink.delivered.empty());
  }
  SECTION("a chunk over the limit") {
    Sink sink;
    FrameAssembler a = sink.Make();
    v1::TensorFrame f = chunks[0];
    f.set_payload(std::string(FrameAssembler::kMaxChunkBytes + 1, 'x'));
    CHECK(a.Add(f).code() == absl::StatusCode::kInvalidArgument);
    CHECK(sink.admitted == 0);
  }
}

TEST_CASE("frame assembler: a short tensor is data loss, never delivered") {
  auto chunks = Chunks("j", Pattern(100), 40);
  chunks[0].set_encoded_size(120);
  Sink sink;
  FrameAssembler a = sink.Make();
  for (int i = 0; i < 2; ++i) REQUIRE(a.Add(chunks[i]).ok());
  CHECK(a.Add(chunks[2]).code() == absl::StatusCode::kDataLoss);
  CHECK(sink.delivered.empty());
}

// The assembler moves bytes; their integrity is the payload's own checksum (a compression
// frame's, a sealed loader state's), which the receiver checks on the whole tensor. A flipped
// byte passes through here unchanged, and JobHost refuses it (pipeline_test).
TEST_CASE("frame assembler: bytes pass through as they came, flipped or not") {
  auto chunks = Chunks("j", Pattern(100), 40);
  std::string p = chunks[1].payload();
  p[3] ^= 1;
  chunks[1].set_payload(p);
  Sink sink;
  FrameAssembler a = sink.Make();
  for (const auto& c : chunks) REQUIRE(a.Add(c).ok());
  REQUIRE(sink.delivered.size() == 1);
  std::string expected = Pattern(100);
  expected[43] ^= 1;
  CHECK(sink.delivered[0] == expected);
}

TEST_CASE("frame assembler: a stream that ends inside a tensor is reported at Finish") {
  Sink sink;
  FrameAssembler a = sink.Make();
  REQUIRE(a.Add(Chunks("j", Pattern(100), 40)[0]).ok());
  const Status s = a.Finish();
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(s.message()).find("1 of 3 chunks") != std::string::npos);
}

}  // namespace
}  // namespace longhaul::daemon
