// LinkSender's queue (daemon/job/sender.h): TryEnqueue queues a tensor only when that needs no
// wait (an empty queue takes anything; otherwise what fits in the capacity, counting tensors
// still in flight) and leaves the others with the caller; it fails once the sender is closed.
// The peer here does not listen, so nothing queued ever leaves.
#include "daemon/job/sender.h"

#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <string>

#include "test/daemon/test_util.h"

namespace longhaul::daemon {
namespace {

OutgoingTensor Tensor(size_t bytes) {
  OutgoingTensor t;
  t.header.set_job_id("j");
  t.payload.assign(bytes, 7);
  return t;
}

TEST_CASE("TryEnqueue queues only what fits without a wait, and fails once closed") {
  LinkMonitor monitor("alpha");
  LinkSenderOptions o;
  o.site = "alpha";
  o.peer = "beta";
  o.address = "127.0.0.1:" + std::to_string(testing::FreePort());
  o.queue_capacity_bytes = 1000;
  o.workers = 1;
  LinkSender sender(o, &monitor, spdlog::default_logger());

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
}

}  // namespace
}  // namespace longhaul::daemon
