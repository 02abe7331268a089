// Fuzz target: the Peer API's edge checks on what a peer sends (daemon/job/checks/job_checks.h,
// daemon/job/state/fragment_slices.h, daemon/job/exchange/inbox.h). The first byte picks the
// message: a stage assignment, a step report, a fragment request (protobuf bytes, as they arrive),
// a run of fragment slices (fp32 frames) into a receiver's array, a sequence of inbox operations,
// or a SendFrames stream of tensor chunks into the frame assembler
// (daemon/transport/frame_assembler.h), or a sealed loader state, or a gossip round's frame
// (fleet/gossip_node.h) applied to a replica's parameters. Invariants: no crash; nothing
// accepted that the checks promise to refuse; the inbox never holds a key outside its window
// and its byte count matches what it holds; the assembler buffers nothing it did not admit and
// delivers only whole tensors of their announced size; a loader state opens only when its
// checksum holds; a gossip frame decodes only when its header check passes and everything the
// decoder promises holds, and applied it leaves every parameter finite and every weight
// positive and finite; a grad-sums frame (daemon/job/exchange/grad_sums_frame.h) decodes only
// to sums that are not negative, and only when it is exactly what its sums encode to; the tied
// embedding's views and frames (daemon/job/sync/tied_round.h) decode only to what they promise.
#include <xxhash.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/frame.h"
#include "daemon/job/checks/job_checks.h"
#include "daemon/job/exchange/grad_sums_frame.h"
#include "daemon/job/exchange/inbox.h"
#include "daemon/job/spec/job_spec.h"
#include "daemon/job/state/fragment_slices.h"
#include "daemon/job/sync/tied_round.h"
#include "daemon/transport/frame_assembler.h"
#include "fleet/gossip_link_node.h"
#include "fleet/gossip_node.h"
#include "google/protobuf/stubs/logging.h"

namespace {

using namespace longhaul;
using namespace longhaul::daemon;
using longhaul::daemon::transport::FrameAssembler;

const char kJob[] =
    "name: f\nmodel: {layers: 4, channels: 32, heads: 2, vocab: 256, context: 32}\n"
    "steps: 100\nbatch_size: 4\nmicrobatch_size: 2\nseq_len: 32\nsites: [alpha, beta]\n";

const JobSpec& Spec() {
  static const JobSpec spec = *ParseJobSpec(kJob, "fuzz", "/nonexistent-fuzz-dir");
  return spec;
}

void Assignment(const uint8_t* d, size_t n) {
  v1::StageAssignment a;
  if (!a.ParseFromArray(d, static_cast<int>(n))) return;
  if (!CheckAssignment(a, Spec(), "beta").ok()) return;
  // Accepted: the promises hold.
  if (!CheckJobId(a.job_id()).ok() || a.stage() >= static_cast<uint32_t>(a.stages_size()) ||
      a.stages(a.stage()).site() != "beta" || a.resume_step() > 100) {
    std::abort();
  }
  uint32_t next = 0;
  for (const auto& s : a.stages()) {
    if (s.layer_begin() != next || s.layer_end() <= s.layer_begin()) std::abort();
    next = s.layer_end();
  }
  if (next != 4) std::abort();
}

void Report(const uint8_t* d, size_t n) {
  v1::StepReport r;
  if (!r.ParseFromArray(d, static_cast<int>(n))) return;
  if (!CheckStepReport(r, 3, 100).ok()) return;
  if (r.stage() >= 3 || r.step() > 100 || r.checkpoint_step() > r.step() + 1 ||
      r.grad_sums_size() > kMaxGradSums) {
    std::abort();
  }
  // A validation loss names the reported step and is no negative number.
  if (r.val_step() != 0 && (r.val_step() != r.step() || r.val_loss() < 0)) std::abort();
  // What the status and metrics show of a sync report: a bounded name, a finite time.
  if (r.sync().codec().size() > 64 || !std::isfinite(r.sync().seconds()) ||
      r.sync().seconds() < 0) {
    std::abort();
  }
  for (const auto& l : r.links()) {
    for (char c : l.codec() + l.reason()) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) std::abort();
    }
  }
}

void Fetch(const uint8_t* d, size_t n) {
  v1::FetchFragmentRequest r;
  if (!r.ParseFromArray(d, static_cast<int>(n))) return;
  if (!CheckFragmentRequest(r, 4, 100).ok()) return;
  const bool current = r.layer_begin() == 0 && r.layer_end() == 0;
  if (!current && (r.layer_begin() >= r.layer_end() || r.layer_end() > 4)) std::abort();
}

// Frames as the fuzzer writes them, [u16 length, little endian][TensorFrame bytes]...:
// `take` gets each one that parses, until it returns false.
template <typename Take>
void ForEachFrame(const uint8_t* d, size_t n, Take take) {
  size_t at = 0;
  while (at + 2 <= n) {
    const size_t len = d[at] | (size_t{d[at + 1]} << 8);
    at += 2;
    if (len > n - at) return;
    v1::TensorFrame f;
    if (f.ParseFromArray(d + at, static_cast<int>(len)) && !take(f)) return;
    at += len;
  }
}

void AppendFrame(const v1::TensorFrame& f, std::string* out) {
  const std::string b = f.SerializeAsString();
  *out += static_cast<char>(b.size() & 0xff);
  *out += static_cast<char>(b.size() >> 8);
  *out += b;
}

// Slices: the array holds d[0] * 3 floats, then frames whose payloads are fp32 frames.
void Chunks(const uint8_t* d, size_t n) {
  if (n < 1) return;
  FragmentArray array;
  array.values.resize(static_cast<size_t>(d[0]) * 3);
  ForEachFrame(d + 1, n - 1, [&](const v1::TensorFrame& f) {
    transport::WireTensor t{f, {f.payload().begin(), f.payload().end()}};
    t.header.clear_payload();
    if (!PlaceSlice(t, &array, "fuzz").ok()) return false;
    if (array.filled > array.values.size()) std::abort();
    return true;
  });
  (void)CheckComplete(array, "fuzz", "parameters");
}

// A SendFrames stream: [u16 length][TensorFrame bytes]... until the assembler refuses one.
// It admits only job f-000001 and tensors of at most 4 KiB.
void Frames(const uint8_t* d, size_t n) {
  uint64_t admitted = 0, delivered = 0;
  FrameAssembler assembler(
      [&](const v1::TensorFrame& first) -> Status {
        if (first.job_id() != "f-000001" || first.encoded_size() > 4096) {
          return absl::PermissionDeniedError("not admitted");
        }
        ++admitted;
        return absl::OkStatus();
      },
      [&](const v1::TensorFrame& first, std::vector<uint8_t> payload) -> Status {
        ++delivered;
        if (first.job_id() != "f-000001" || !first.payload().empty() ||
            payload.size() != first.encoded_size()) {
          std::abort();
        }
        return absl::OkStatus();
      });
  ForEachFrame(d, n, [&](const v1::TensorFrame& f) { return assembler.Add(f).ok(); });
  (void)assembler.Finish();
  if (delivered > admitted) std::abort();
}

// A sealed loader state as a fragment fetch delivers it: opened only when its checksum
// holds, and then exactly the text before the checksum.
void LoaderState(const uint8_t* d, size_t n) {
  StatusOr<std::string> text = OpenLoaderState({d, n}, "fuzz");
  if (!text.ok()) return;
  if (n < 8 || n > kMaxLoaderStateBytes || text->size() != n - 8 ||
      std::memcmp(text->data(), d, text->size()) != 0 ||
      SealLoaderState(*text) != std::vector<uint8_t>(d, d + n)) {
    std::abort();
  }
}

// Inbox operations: 1 byte op + 3 bytes of key (attempt, step, microbatch).
void InboxOps(const uint8_t* d, size_t n) {
  Inbox inbox(1 << 12);
  for (size_t at = 0; at + 4 <= n; at += 4) {
    TensorKey key;
    key.attempt = d[at + 1] % 4;
    key.step = d[at + 2] % 16;
    key.microbatch = d[at + 3] % 4;
    key.kind = 1;
    switch (d[at] % 4) {
      case 0: {
        const bool allowed = inbox.CheckKey(key).ok();
        ReceivedTensor t;
        t.payload.resize(d[at] % 64);
        // Put blocks only while the inbox is over capacity and not empty: never here (each
        // tensor is small and capacity is 4 KiB), unless the fuzzer fills it: take first.
        if (inbox.bytes() + t.payload.size() > (1 << 12)) break;
        const bool put = inbox.Put(key, std::move(t)).ok();
        if (put && !allowed) std::abort();
        break;
      }
      case 1:
        (void)inbox.Take(key, 0);
        break;
      case 2:
        inbox.AdvanceTo(key.step);
        break;
      default:
        inbox.StartAttempt(key.attempt, key.step);
    }
  }
}

// d[0]: the slice's size (1..64); the rest: a frame of slice 3.
void GradSums(const uint8_t* d, size_t n) {
  if (n < 1) return;
  const size_t slices = d[0] % 40;
  const std::span<const uint8_t> frame(d + 1, n - 1);
  const auto sums = DecodeGradSums(frame, slices);
  if (!sums.ok()) return;
  if (sums->size() != slices || frame.size() != GradSumsFrameBytes(slices)) std::abort();
  for (double v : *sums) {
    if (v < 0) std::abort();  // NaN and +inf pass (a diverged gradient's)
  }
  const std::vector<uint8_t> again = EncodeGradSums(*sums);
  if (again.size() != frame.size() || std::memcmp(again.data(), frame.data(), again.size()) != 0) {
    std::abort();
  }
}

void Gossip(const uint8_t* d, size_t n) {
  if (n < 1) return;
  const uint64_t size = 1 + d[0] % 64;
  const std::span<const uint8_t> frame(d + 1, n - 1);
  const auto f = fleet::DecodeGossipFrame(frame, 3, size);
  if (!f.ok()) return;
  if (!fleet::CheckGossipFrameHeader(frame, 3, size, frame.size()).ok()) std::abort();
  if (f->slice != 3 || f->count() == 0 || f->count() > size || f->w.size() != f->count() ||
      f->dense != (f->count() == size) || (!f->dense && f->index.size() != f->count())) {
    std::abort();
  }
  for (size_t i = 0; i < f->count(); ++i) {
    if (f->at(i) >= size || (i > 0 && f->at(i) <= f->at(i - 1))) std::abort();
    if (!std::isfinite(f->x[i]) || !std::isfinite(f->w[i]) || !(f->w[i] > 0)) std::abort();
  }
  fleet::GossipNode node({{3, 0, static_cast<int64_t>(size)}}, size, 0.5);
  std::vector<float> x(size, 0.25f);
  node.Reset(x);
  const std::vector<uint32_t> picked = node.Pick(0, x, 1);
  const std::vector<fleet::GossipNode::Received> in = {{1.0 / 3, &*f}};
  node.Apply(0, picked, 0.5, in, x);
  for (size_t c = 0; c < size; ++c) {
    if (!std::isfinite(x[c]) || !(node.weights()[c] > 0) || !std::isfinite(node.weights()[c])) {
      std::abort();
    }
  }
}

// A gossip link frame (fleet/gossip_link_node.h) for slice 3 of 1..64 coordinates in q4,
// tracked or not: decoded only when its header passes too, every value and drift finite, the
// weight in range; a node that takes it keeps finite parameters and weights.
void LinkGossip(const uint8_t* d, size_t n) {
  if (n < 2) return;
  const uint64_t size = 1 + d[0] % 64;
  const bool tracked = (d[1] & 1) != 0;
  std::span<const uint8_t> frame(d + 2, n - 2);
  std::vector<uint8_t> built;
  if ((d[1] & 2) != 0 && n >= 4) {
    // A sender's own frame of parameters drawn from the input (a key frame with bit 2), then
    // one byte changed (d[2] picks it, d[3] is the change) and, with bit 3, the trailing
    // checksum made to match: reaching the checks behind the checksum and the codec's.
    auto sender = fleet::LinkGossipNode::Create(1, 2, {{3, 0, static_cast<int64_t>(size)}}, size,
                                                "q4", tracked);
    if (!sender.ok()) std::abort();
    std::vector<float> x(size);
    for (size_t c = 0; c < size; ++c) x[c] = static_cast<float>(d[(4 + c) % n]) / 64.0f - 2.0f;
    (*sender)->Reset(std::vector<float>(size, 0.0f));
    if ((d[1] & 4) != 0) (*sender)->ResyncAll();
    (*sender)->BeginRound(x);
    auto f = (*sender)->Frame(0, 0, d[2], x);
    if (!f.ok()) std::abort();
    built = std::move(*f);
    built[d[2] % built.size()] ^= d[3];
    if ((d[1] & 8) != 0) {
      const uint64_t sum = XXH64(built.data(), built.size() - 8, 0);
      std::memcpy(built.data() + built.size() - 8, &sum, 8);
    }
    frame = built;
  }
  static const compression::CodecSpec q4 = *fleet::GossipLinkCodec("q4");
  const auto f = fleet::DecodeLinkFrame(frame, 3, size, q4, tracked);
  if (!f.ok()) return;
  if (!fleet::CheckLinkFrameHeader(frame, 3, size, tracked).ok()) std::abort();
  if (f->values.size() != size || f->drift.size() != (tracked ? size : 0) ||
      !(f->weight > 0 && f->weight <= fleet::kMaxLinkWeight) || (f->key && f->base != 0)) {
    std::abort();
  }
  for (float v : f->values) {
    if (!std::isfinite(v)) std::abort();
  }
  for (float v : f->drift) {
    if (!std::isfinite(v)) std::abort();
  }
  auto node = fleet::LinkGossipNode::Create(0, 2, {{3, 0, static_cast<int64_t>(size)}}, size, "q4",
                                            tracked);
  if (!node.ok()) std::abort();
  std::vector<float> x(size, 0.25f);
  (*node)->Reset(x);
  (*node)->BeginRound(x);
  for (int round = 0; round < 2; ++round) {  // twice: the copy moves by it again
    const fleet::LinkGossipNode::Received in[1] = {{1, 0.5, &*f}};
    (*node)->Apply(0, {}, {}, in, x);
    for (size_t c = 0; c < size; ++c) {
      if (!std::isfinite(x[c])) std::abort();
    }
    if (!((*node)->weight(0) > 0) || !std::isfinite((*node)->weight(0))) std::abort();
  }
}

// The tied embedding's holders' messages (daemon/job/sync/tied_round.h), read by replica 1 of
// 1..8 replicas for the sync after step 9: a view decodes only to flags of other replicas,
// ascending, and a removal count within the job, and encodes back to the same bytes; the
// frames' container only to ascending senders other than the reader, each within the bound,
// and encodes back to the same bytes.
void TiedRound(const uint8_t* d, size_t n) {
  if (n < 1) return;
  const int replicas = 2 + d[0] % 7;
  const std::vector<uint8_t> bytes(d + 1, d + n);
  if (auto v = DecodeTiedRoundView(bytes, replicas, 1, 9); v.ok()) {
    if (v->removed > static_cast<uint64_t>(replicas) || v->step != 9) std::abort();
    for (const std::vector<int>* list : {&v->came, &v->unsent}) {
      for (size_t i = 0; i < list->size(); ++i) {
        const int r = (*list)[i];
        if (r < 0 || r >= replicas || r == 1 || (i > 0 && (*list)[i - 1] >= r)) std::abort();
      }
    }
    if (EncodeTiedRoundView(*v, replicas, 1) != bytes) std::abort();
  }
  if (auto f = DecodeTiedFrames(bytes, replicas, 1, 9, 64); f.ok()) {
    for (size_t i = 0; i < f->size(); ++i) {
      const auto& [r, frame] = (*f)[i];
      if (r < 0 || r >= replicas || r == 1 || (i > 0 && (*f)[i - 1].first >= r) ||
          frame.size() > 64) {
        std::abort();
      }
    }
    if (EncodeTiedFrames(9, *f) != bytes) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Protobuf logs each string field with invalid UTF-8 it refuses; the refusal is the point.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  if (size == 0) return 0;
  const uint8_t* d = data + 1;
  const size_t n = size - 1;
  switch (data[0] % 11) {
    case 0:
      Assignment(d, n);
      break;
    case 1:
      Report(d, n);
      break;
    case 2:
      Fetch(d, n);
      break;
    case 3:
      Chunks(d, n);
      break;
    case 4:
      InboxOps(d, n);
      break;
    case 5:
      Frames(d, n);
      break;
    case 7:
      Gossip(d, n);
      break;
    case 8:
      GradSums(d, n);
      break;
    case 9:
      LinkGossip(d, n);
      break;
    case 10:
      TiedRound(d, n);
      break;
    default:
      LoaderState(d, n);
  }
  return 0;
}

extern "C" void LonghaulFuzzSeeds(std::vector<std::string>* seeds) {
  v1::StageAssignment a;
  a.set_job_id("f-000001");
  a.set_coordinator("alpha");
  a.set_job_yaml(kJob);
  a.set_stage(1);
  a.set_resume_step(4);
  for (auto [site, b, e] : {std::tuple{"alpha", 0, 2}, std::tuple{"beta", 2, 4}}) {
    auto* s = a.add_stages();
    s->set_site(site);
    s->set_layer_begin(b);
    s->set_layer_end(e);
  }
  *a.mutable_migrate_from() = a.stages();
  seeds->push_back(std::string(1, '\0') + a.SerializeAsString());
  v1::StepReport r;
  r.set_job_id("f-000001");
  r.set_stage(1);
  r.set_step(7);
  r.set_checkpoint_step(8);
  for (int i = 0; i < 5; ++i) r.add_grad_sums(0.5 * i);
  seeds->push_back(std::string(1, '\1') + r.SerializeAsString());
  v1::FetchFragmentRequest f;
  f.set_job_id("f-000001");
  f.set_step(4);
  f.set_layer_begin(1);
  f.set_layer_end(3);
  seeds->push_back(std::string(1, '\2') + f.SerializeAsString());
  std::string chunks(1, '\3');
  chunks += '\x08';  // 24 floats, in three slices of 8 (fp32 frames)
  auto fp32 = compression::MakeCodec("fp32");
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> values(8, 0.25f * i);
    const int64_t shape[] = {8};
    std::vector<uint8_t> frame;
    if (!fp32.ok() || !compression::EncodeFrame(**fp32, values, shape, {}, &frame).ok()) return;
    v1::TensorFrame t;
    t.set_element_offset(8 * i);
    t.set_payload(frame.data(), frame.size());
    AppendFrame(t, &chunks);
  }
  seeds->push_back(chunks);
  std::string ops(1, '\4');
  for (int i = 0; i < 64; ++i) ops += std::string{char(i % 4), char(i % 3), char(i % 5), char(i)};
  seeds->push_back(ops);
  // A 100-byte tensor in chunks of 40, 40 and 20 bytes.
  std::string stream(1, '\5');
  const std::string tensor(100, 'y');
  for (int i = 0; i < 3; ++i) {
    v1::TensorFrame t;
    t.set_job_id("f-000001");
    if (i == 0) {
      t.set_encoded_size(tensor.size());
      t.set_chunk_count(3);
    }
    t.set_chunk_index(i);
    t.set_chunk_offset(40 * i);
    t.set_payload(tensor.substr(40 * i, 40));
    AppendFrame(t, &stream);
  }
  seeds->push_back(stream);
  const std::vector<uint8_t> sealed = SealLoaderState("pos=12 epoch=0 shard=0/2 block=3");
  seeds->push_back(std::string(1, '\6') + std::string(sealed.begin(), sealed.end()));
  // Gossip frames of slice 3 of 12 coordinates: a sparse one (3 of them) and a dense one.
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.25f, 1.0f, -3.0f,
                                4.0f, 0.0f,  1.5f, -0.5f, 2.5f, 3.0f};
  const std::vector<float> w = {1.0f, 0.5f, 1.5f, 1.0f, 0.75f, 1.0f,
                                2.0f, 1.0f, 1.0f, 0.5f, 1.0f,  1.25f};
  for (const std::vector<uint32_t>& picked :
       {std::vector<uint32_t>{1, 4, 9},
        std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}}) {
    const std::vector<uint8_t> frame = fleet::EncodeGossipFrame(3, picked, x, w);
    seeds->push_back(std::string{'\7', char(11)} + std::string(frame.begin(), frame.end()));
  }
  // A grad-sums frame of 5 slices.
  const std::vector<uint8_t> sums = EncodeGradSums(std::vector<double>{0.5, 0.0, 2.25, 1e-3, 7.0});
  seeds->push_back(std::string{'\10', char(5)} + std::string(sums.begin(), sums.end()));
  // The tied embedding's view (replica 1 of 4: frames from 0 and 3, not sent to 2) and the
  // frames the first stage took.
  TiedRoundView view;
  view.step = 9;
  view.removed = 1;
  view.hash = 0x1234;
  view.came = {0, 3};
  view.unsent = {2};
  const std::vector<uint8_t> v = EncodeTiedRoundView(view, 4, 1);
  seeds->push_back(std::string{'\12', char(2)} + std::string(v.begin(), v.end()));
  const std::vector<uint8_t> tied =
      EncodeTiedFrames(9, std::vector<TiedFrame>{{0, {1, 2, 3}}, {3, std::vector<uint8_t>(20, 7)}});
  seeds->push_back(std::string{'\12', char(2)} + std::string(tied.begin(), tied.end()));
}
