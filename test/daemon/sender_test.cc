// LinkSender (daemon/job/exchange/sender.h) against a fake link: TryEnqueue queues a tensor only
// when that needs no wait (an empty queue takes anything; otherwise what fits in the capacity,
// counting tensors still in flight); tensors leave in queue order; a send that may heal is
// retried until it is delivered, once; a refusal that will not heal fails the sender, naming
// the tensor and the peer, and every later call returns that error.
#include "daemon/job/exchange/sender.h"

#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "daemon/job/exchange/inbox.h"
#include "test/daemon/fake_link.h"
#include "test/daemon/test_util.h"

namespace longhaul::daemon {
namespace {

using namespace std::chrono_literals;

OutgoingTensor Tensor(size_t bytes, uint32_t microbatch = 0) {
  OutgoingTensor t;
  t.header.set_job_id("j");
  t.header.set_step(3);
  t.header.set_microbatch(microbatch);
  t.header.set_kind(v1::TENSOR_KIND_ACTIVATION);
  t.payload.assign(bytes, 7);
  return t;
}

LinkSenderOptions Options(size_t capacity = 512 << 20) {
  LinkSenderOptions o;
  o.site = "alpha";
  o.peer = "beta";
  o.queue_capacity_bytes = capacity;
  o.workers = 1;
  o.max_workers = 1;
  return o;
}

TEST_CASE("TryEnqueue queues only what fits without a wait, and fails once closed") {
  LinkMonitor monitor("alpha");
  testing::FakeLink link("beta");
  link.Hold();  // nothing leaves
  LinkSender sender(Options(1000), &link, &monitor, spdlog::default_logger());

  OutgoingTensor big = Tensor(800);
  auto queued = sender.TryEnqueue(&big);
  REQUIRE(queued.ok());
  CHECK(*queued);  // an empty queue takes anything

  OutgoingTensor over = Tensor(300);
  queued = sender.TryEnqueue(&over);
  REQUIRE(queued.ok());
  CHECK_FALSE(*queued);  // 800 + 300 > 1000: the caller keeps it
  CHECK(over.payload.size() == 300);

  OutgoingTensor fits = Tensor(200);
  queued = sender.TryEnqueue(&fits);
  REQUIRE(queued.ok());
  CHECK(*queued);  // 800 + 200 fits

  sender.Close();
  OutgoingTensor late = Tensor(1);
  CHECK(sender.TryEnqueue(&late).status().code() == absl::StatusCode::kCancelled);
  CHECK(sender.Enqueue(Tensor(1)).code() == absl::StatusCode::kCancelled);
  link.Release();
}

TEST_CASE("tensors leave in queue order; one that may heal is retried and delivered once") {
  LinkMonitor monitor("alpha");
  testing::FakeLink link("beta");
  link.Script({absl::UnavailableError("connection reset"), absl::DeadlineExceededError("slow")});
  LinkSender sender(Options(), &link, &monitor, spdlog::default_logger());
  for (uint32_t mb = 0; mb < 4; ++mb) REQUIRE(sender.Enqueue(Tensor(100 + mb, mb)).ok());
  REQUIRE(sender.Flush().ok());
  const auto delivered = link.delivered();
  REQUIRE(delivered.size() == 4);
  for (uint32_t mb = 0; mb < 4; ++mb) {
    CHECK(delivered[mb].header.microbatch() == mb);
    CHECK(delivered[mb].payload.size() == 100 + mb);
  }
  CHECK(link.attempts() == 6);
  CHECK(sender.stats().retries == 2);
  CHECK(sender.stats().tensors == 4);
  CHECK(sender.stats().wire_bytes == 100 + 101 + 102 + 103);
  CHECK(sender.error().ok());
}

TEST_CASE("a refusal that will not heal fails the sender, naming the tensor and the peer") {
  LinkMonitor monitor("alpha");
  testing::FakeLink link("beta");
  link.Script({absl::OkStatus(), absl::InvalidArgumentError("shape [2,3] is not [2,4]")});
  LinkSender sender(Options(), &link, &monitor, spdlog::default_logger());
  REQUIRE(sender.Enqueue(Tensor(10, 0)).ok());
  REQUIRE(sender.Enqueue(Tensor(10, 1)).ok());
  const Status flushed = sender.Flush();
  REQUIRE_FALSE(flushed.ok());
  CHECK(flushed.code() == absl::StatusCode::kInvalidArgument);
  const std::string message(flushed.message());
  CHECK_THAT(message, Catch::Contains("site 'beta'"));
  CHECK_THAT(message, Catch::Contains("shape [2,3] is not [2,4]"));
  CHECK_THAT(message, Catch::Contains(KeyOf(Tensor(10, 1).header).DebugString()));
  CHECK(sender.error() == flushed);
  CHECK(sender.Enqueue(Tensor(10, 2)) == flushed);
  OutgoingTensor t = Tensor(10, 3);
  CHECK(sender.TryEnqueue(&t).status() == flushed);
  CHECK(link.delivered().size() == 1);  // the first one; nothing after the refusal
  CHECK(link.attempts() == 2);
}

}  // namespace
}  // namespace longhaul::daemon

namespace longhaul::daemon {
namespace {

// The link monitor's side of the capacity estimate: samples from transfers that found the
// link idle only raise it; the transfers a job made are kept so that a probe can add the
// bytes it shared the link with.
TEST_CASE("link estimate: idle-start samples are lower bounds; shared traffic is prorated") {
  LinkMonitor monitor("alpha");
  monitor.AddPeer("beta", "addr");
  monitor.AddBandwidthSample("beta", 1000, 1.0);  // a probe: 1000 B/s
  monitor.AddBandwidthSample("beta", 400, 1.0, /*lower_bound=*/true);
  CHECK(monitor.Outbound("beta").bandwidth_bytes_per_second() == 1000);  // not dragged down
  monitor.AddBandwidthSample("beta", 3000, 1.0, /*lower_bound=*/true);
  CHECK(monitor.Outbound("beta").bandwidth_bytes_per_second() == 2000);  // raised (EWMA 0.5)
  monitor.AddBandwidthSample("beta", 500, 1.0);  // a saturated sample lowers it
  CHECK(monitor.Outbound("beta").bandwidth_bytes_per_second() == 1250);
  CHECK(monitor.Outbound("beta").bandwidth_samples() == 3);

  monitor.AddTransfer("beta", 10.0, 12.0, 2000);   // 1000 B/s over [10, 12]
  monitor.AddTransfer("beta", 11.5, 11.5, 99);     // too quick for the clock: whole
  monitor.AddTransfer("beta", 12.0, 11.0, 77);     // ends before it starts: ignored
  monitor.AddTransfer("gamma", 10.0, 12.0, 5000);  // not a peer: ignored
  monitor.AddTransfer("beta", 13.0, 14.0, 300);
  CHECK(monitor.TransferBytesDuring("beta", 11.0, 13.5) == Approx(1000 + 99 + 150));
  CHECK(monitor.TransferBytesDuring("beta", 0.0, 100.0) == Approx(2399));
  CHECK(monitor.TransferBytesDuring("beta", 12.0, 13.0) == 0);
  CHECK(monitor.TransferBytesDuring("beta", 13.0, 11.0) == 0);  // an empty window
  CHECK(monitor.TransferBytesDuring("gamma", 0.0, 100.0) == 0);
}

// A probe far below the estimate asks for a second one; an asked-for probe that low is the
// link's new level; others are averaged in.
TEST_CASE("link estimate: an asked-for probe far below the estimate replaces it") {
  LinkMonitor monitor("alpha");
  monitor.AddPeer("beta", "addr");
  monitor.AddProbeSample("beta", 25'000'000, 1.0, /*asked=*/true);  // the first: taken
  CHECK(monitor.Outbound("beta").bandwidth_bytes_per_second() == 25e6);
  CHECK_FALSE(monitor.TakeProbeRequest("beta"));
  monitor.AddProbeSample("beta", 2'500'000, 1.0, /*asked=*/false);  // periodic: averaged,
  CHECK(monitor.Outbound("beta").bandwidth_bytes_per_second() == Approx(13.75e6));
  CHECK(monitor.TakeProbeRequest("beta"));                          // and a second probe asked for
  monitor.AddProbeSample("beta", 10'000'000, 1.0, /*asked=*/true);  // not under half: averaged
  CHECK(monitor.Outbound("beta").bandwidth_bytes_per_second() == Approx(11.875e6));
  CHECK_FALSE(monitor.TakeProbeRequest("beta"));
  monitor.AddProbeSample("beta", 2'500'000, 1.0, /*asked=*/true);  // under half, asked: taken
  CHECK(monitor.Outbound("beta").bandwidth_bytes_per_second() == 2.5e6);
  CHECK(monitor.Outbound("beta").bandwidth_samples() == 4);
  monitor.AddProbeSample("beta", 0, 1.0, true);           // nothing measured: ignored
  monitor.AddProbeSample("beta", 100, 0.0, true);         // no time: ignored
  monitor.AddProbeSample("gamma", 100, 1.0, true);        // not a peer: ignored
  monitor.AddProbeSample("beta", 25'000'000, 1.0, true);  // a rise is averaged
  CHECK(monitor.Outbound("beta").bandwidth_bytes_per_second() == Approx(13.75e6));
  CHECK(monitor.Outbound("beta").bandwidth_samples() == 5);
}

// One tensor at a time over a link that is not the bottleneck: what the sender measures is
// a lower bound, which raises a low estimate and leaves a higher (probed) one alone; every
// delivered tensor is recorded for the probes.
TEST_CASE("a sender's lone transfers do not lower the link estimate; they are recorded") {
  LinkMonitor monitor("alpha");
  monitor.AddPeer("beta", "addr");
  monitor.AddBandwidthSample("beta", 1000, 1.0);  // 1000 B/s
  testing::FakeLink link("beta");
  link.OnDeliver([](const transport::WireTensor&) {  // 300 KiB in no less than 10 ms
    std::this_thread::sleep_for(10ms);
    return absl::OkStatus();
  });
  LinkSender sender(Options(), &link, &monitor, spdlog::default_logger());
  auto send_three = [&] {
    for (uint32_t mb = 0; mb < 3; ++mb) {
      REQUIRE(sender.Enqueue(Tensor(300 << 10, mb)).ok());
      REQUIRE(sender.Flush().ok());
    }
  };
  send_three();
  const double raised = monitor.Outbound("beta").bandwidth_bytes_per_second();
  CHECK(raised > 1e4);  // about 30 MB/s each (less on a loaded machine), far above 1000 B/s
  CHECK(raised < 31e6);
  monitor.AddBandwidthSample("beta", uint64_t{1} << 40, 1.0);  // a probe: far faster
  const double probed = monitor.Outbound("beta").bandwidth_bytes_per_second();
  send_three();
  CHECK(monitor.Outbound("beta").bandwidth_bytes_per_second() == probed);
  CHECK(monitor.TransferBytesDuring("beta", 0, 1e18) == Approx(6.0 * (300 << 10)));
  CHECK_FALSE(monitor.TakeProbeRequest("beta"));  // one at a time: no sign of a fall
}

// The round trip a transfer's time holds is the link's base one: heartbeats that queued behind
// a busy link's data raise the moving average, not the least of the recent samples, and a
// sender subtracting the average read links above their rate.
TEST_CASE("a sender's sample subtracts the base round trip, not the queue-inflated average") {
  LinkMonitor monitor("alpha");
  monitor.AddPeer("beta", "addr");
  CHECK(monitor.BaseRttSeconds("beta") == 0);  // no sample yet
  monitor.AddRttSample("beta", 0.020);
  for (int i = 0; i < 5; ++i) monitor.AddRttSample("beta", 0.050);  // queued heartbeats
  CHECK(monitor.Outbound("beta").rtt_seconds() > 0.044);
  CHECK(monitor.BaseRttSeconds("beta") == 0.020);
  CHECK(monitor.BaseRttSeconds("gamma") == 0);  // not a peer

  // 300 KiB in no less than 60 ms, 20 of them the round trip: at most 300 KiB / 40 ms on the
  // wire, however slow the machine (slowness only lengthens the call). Subtracting the
  // average (45 ms) read it at 20 MB/s.
  testing::FakeLink link("beta");
  link.OnDeliver([](const transport::WireTensor&) {
    std::this_thread::sleep_for(60ms);
    return absl::OkStatus();
  });
  LinkSender sender(Options(), &link, &monitor, spdlog::default_logger());
  for (uint32_t mb = 0; mb < 3; ++mb) {
    REQUIRE(sender.Enqueue(Tensor(300 << 10, mb)).ok());
    REQUIRE(sender.Flush().ok());
  }
  const double estimate = monitor.Outbound("beta").bandwidth_bytes_per_second();
  CHECK(estimate > 0);
  CHECK(estimate <= (300 << 10) / 0.040 * 1.01);  // the tensor's header is a few bytes more

  // The base follows the newest 30 samples: an old low one ages out.
  for (int i = 0; i < 30; ++i) monitor.AddRttSample("beta", 0.030);
  CHECK(monitor.BaseRttSeconds("beta") == 0.030);
}

// Every call lasts at least a round trip, so over a long one a fixed number of workers caps
// the tensors per round trip: while tensors wait with every worker busy, another starts, up
// to max_workers, and no more.
TEST_CASE("calls in flight grow while tensors wait, up to max_workers") {
  LinkMonitor monitor("alpha");
  testing::FakeLink link("beta");
  link.Hold();  // every call stays in flight: a very long round trip
  LinkSenderOptions o = Options();
  o.workers = 1;
  o.max_workers = 4;
  LinkSender sender(o, &link, &monitor, spdlog::default_logger());
  for (uint32_t mb = 0; mb < 6; ++mb) REQUIRE(sender.Enqueue(Tensor(100, mb)).ok());
  for (int i = 0; i < 10000 && link.waiting() < 4; ++i) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  CHECK(link.waiting() == 4);  // all four started, and never more than max_workers
  link.Release();
  REQUIRE(sender.Flush().ok());
  CHECK(link.delivered().size() == 6);
  CHECK(sender.stats().tensors == 6);
}

// Transfers that queued behind each other yet moved far less than such transfers did before:
// the link may have fallen, and an early probe is asked for (the estimate itself stays:
// probes set it). Moving less than the probed capacity alone (a long round trip) is no fall.
TEST_CASE("a sender's backlogged transfers far below their usual rate ask for a probe") {
  LinkMonitor monitor("alpha");
  monitor.AddPeer("beta", "addr");
  monitor.AddBandwidthSample("beta", uint64_t{1} << 40, 1.0);
  testing::FakeLink link("beta");
  link.OnDeliver([](const transport::WireTensor&) {
    std::this_thread::sleep_for(10ms);
    return absl::OkStatus();
  });
  LinkSenderOptions o = Options();
  o.workers = 2;
  LinkSender sender(o, &link, &monitor, spdlog::default_logger());
  link.Hold();  // both tensors in flight at once
  REQUIRE(sender.Enqueue(Tensor(300 << 10, 0)).ok());
  REQUIRE(sender.Enqueue(Tensor(300 << 10, 1)).ok());
  while (link.waiting() < 2) std::this_thread::sleep_for(1ms);
  link.Release();
  REQUIRE(sender.Flush().ok());
  CHECK(monitor.Outbound("beta").bandwidth_bytes_per_second() == double(uint64_t{1} << 40));
  CHECK_FALSE(monitor.TakeProbeRequest("beta"));  // far below the probe, but the first such
  // The same kind of transfers, 100 times slower than the first (as the monitor sees them).
  monitor.AddBandwidthSample("beta", 600 << 10, 1.0, /*lower_bound=*/true, /*backlogged=*/true);
  CHECK(monitor.TakeProbeRequest("beta"));
  CHECK_FALSE(monitor.TakeProbeRequest("beta"));  // taken once
  // Steady backlogged transfers far below a probed capacity (a long round trip): no probes.
  LinkMonitor steady("alpha");
  steady.AddPeer("beta", "addr");
  steady.AddBandwidthSample("beta", uint64_t{1} << 30, 1.0);
  for (uint64_t bytes : {1000, 900, 1100, 800, 1000}) {
    steady.AddBandwidthSample("beta", bytes, 1.0, /*lower_bound=*/true, /*backlogged=*/true);
    CHECK_FALSE(steady.TakeProbeRequest("beta"));
  }
}

}  // namespace
}  // namespace longhaul::daemon
