// Inbox (daemon/job/exchange/inbox.h) on its own: tensors filed and taken by key, byte accounting,
// duplicates dropped, the window of attempts and steps it accepts, what AdvanceTo and
// StartAttempt drop, and every way a wait ends (the tensor, a timeout, a superseded attempt,
// closing) -- the checks the stage and the transport rely on.
#include "daemon/job/exchange/inbox.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <thread>

namespace longhaul::daemon {
namespace {

TensorKey Key(uint32_t attempt, uint64_t step, uint32_t mb = 0,
              int kind = v1::TENSOR_KIND_ACTIVATION) {
  return {attempt, step, mb, kind, 0};
}

ReceivedTensor Tensor(size_t bytes, const std::string& from = "alpha") {
  ReceivedTensor t;
  t.from_site = from;
  t.payload.assign(bytes, 1);
  return t;
}

TEST_CASE("inbox: a tensor is taken by its key, once, and its bytes are counted") {
  Inbox inbox(1 << 20);
  inbox.StartAttempt(1, 0);
  REQUIRE(inbox.Put(Key(1, 0, 0), Tensor(100)).ok());
  REQUIRE(inbox.Put(Key(1, 0, 1), Tensor(30)).ok());
  CHECK(inbox.bytes() == 130);
  auto t = inbox.Take(Key(1, 0, 1), 0);
  REQUIRE(t.ok());
  CHECK(t->payload.size() == 30);
  CHECK(t->from_site == "alpha");
  CHECK(inbox.bytes() == 100);
  CHECK(inbox.Take(Key(1, 0, 1), 0).status().code() == absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("inbox: a resent key is dropped, not filed twice") {
  Inbox inbox(1 << 20);
  inbox.StartAttempt(1, 0);
  REQUIRE(inbox.Put(Key(1, 0), Tensor(10)).ok());
  REQUIRE(inbox.Put(Key(1, 0), Tensor(10)).ok());  // a sender retrying after a dropped call
  CHECK(inbox.duplicates() == 1);
  CHECK(inbox.bytes() == 10);
  REQUIRE(inbox.Take(Key(1, 0), 0).ok());
  REQUIRE(inbox.Put(Key(1, 0), Tensor(10)).ok());  // taken already: still a duplicate
  CHECK(inbox.duplicates() == 2);
  CHECK(inbox.bytes() == 0);
}

TEST_CASE("inbox: only the current and next attempt, and at most two steps ahead") {
  Inbox inbox(1 << 20);
  inbox.StartAttempt(3, 5);
  CHECK(inbox.CheckKey(Key(3, 5)).ok());
  CHECK(inbox.CheckKey(Key(3, 5 + Inbox::kStepsAhead)).ok());
  CHECK(inbox.CheckKey(Key(4, 0)).ok());  // the next attempt may start early
  CHECK(inbox.CheckKey(Key(2, 5)).code() == absl::StatusCode::kFailedPrecondition);
  CHECK(inbox.CheckKey(Key(5, 0)).code() == absl::StatusCode::kOutOfRange);
  CHECK(inbox.CheckKey(Key(3, 6 + Inbox::kStepsAhead)).code() == absl::StatusCode::kOutOfRange);
  CHECK(inbox.Put(Key(3, 9), Tensor(1)).code() == absl::StatusCode::kOutOfRange);
  CHECK(inbox.bytes() == 0);
}

TEST_CASE("inbox: moving on drops what the stage will never take") {
  Inbox inbox(1 << 20);
  inbox.StartAttempt(1, 0);
  REQUIRE(inbox.Put(Key(1, 0), Tensor(10)).ok());
  REQUIRE(inbox.Put(Key(1, 1), Tensor(20)).ok());
  REQUIRE(inbox.Put(Key(2, 0), Tensor(40)).ok());
  inbox.AdvanceTo(1);  // step 0's tensor goes
  CHECK(inbox.bytes() == 60);
  REQUIRE(inbox.Put(Key(1, 0, 3), Tensor(5)).ok());  // a step passed: a resend, dropped
  CHECK(inbox.bytes() == 60);
  inbox.StartAttempt(2, 0);  // attempt 1's tensors go; attempt 2's stays
  CHECK(inbox.bytes() == 40);
  REQUIRE(inbox.Take(Key(2, 0), 0).ok());
  CHECK(inbox.Take(Key(1, 1), 0).status().code() == absl::StatusCode::kAborted);
}

TEST_CASE("inbox: a streaming sync's frames stay for the sync lag, nothing else does") {
  Inbox inbox(1 << 20);
  inbox.StartAttempt(1, 4);
  inbox.SetSyncLag(2);
  REQUIRE(inbox.Put(Key(1, 4, 1, v1::TENSOR_KIND_SYNC), Tensor(10)).ok());
  REQUIRE(inbox.Put(Key(1, 4, 0), Tensor(20)).ok());
  inbox.AdvanceTo(6);  // the activation goes; the sync frame of step 4 is taken at step 6
  CHECK(inbox.bytes() == 10);
  // One sent at step 4 that arrives now is filed, not taken for a resend.
  REQUIRE(inbox.Put(Key(1, 4, 2, v1::TENSOR_KIND_SYNC), Tensor(5)).ok());
  CHECK(inbox.bytes() == 15);
  CHECK(inbox.duplicates() == 0);
  REQUIRE(inbox.Take(Key(1, 4, 1, v1::TENSOR_KIND_SYNC), 0).ok());
  inbox.AdvanceTo(7);  // beyond the lag: dropped, and a late one is a resend
  CHECK(inbox.bytes() == 0);
  REQUIRE(inbox.Put(Key(1, 4, 3, v1::TENSOR_KIND_SYNC), Tensor(5)).ok());
  CHECK(inbox.bytes() == 0);
  CHECK(inbox.duplicates() == 1);
}

// The wake-up checks below start a waiter, wait until the inbox counts it as blocked
// (Inbox::waiters(), so the waiter is inside its wait, not about to start it), and only then
// do what must wake it. A missing notify then leaves the waiter blocked, and the test fails at
// kGuard instead of passing because the waiter came late. kGuard and kWaitSeconds are hang
// guards on wake-ups that take microseconds, not timings: a wait bounded by them fails the
// test rather than hanging it.
constexpr auto kGuard = std::chrono::seconds(20);
constexpr double kWaitSeconds = 40;  // the waiter's own timeout, past kGuard

// Waits until `n` calls are blocked in `inbox`; false after kGuard.
bool WaitForWaiters(const Inbox& inbox, int n) {
  const auto deadline = std::chrono::steady_clock::now() + kGuard;
  while (inbox.waiters() < n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// True once `waiter` has returned; false after kGuard, when it closes the inbox to end the
// wait (so a failing test ends rather than hangs).
template <typename T>
bool WokenUp(std::future<T>& waiter, Inbox& inbox) {
  if (waiter.wait_for(kGuard) == std::future_status::ready) return true;
  inbox.Close("test: the waiter was not woken up");
  return false;
}

TEST_CASE("inbox: a waiting Take ends with the tensor, a new attempt, or closing") {
  Inbox inbox(1 << 20);
  inbox.StartAttempt(1, 0);
  CHECK(inbox.waiters() == 0);

  SECTION("the tensor is filed") {
    auto take = std::async(std::launch::async, [&] { return inbox.Take(Key(1, 0), kWaitSeconds); });
    REQUIRE(WaitForWaiters(inbox, 1));
    REQUIRE(inbox.Put(Key(1, 0), Tensor(8)).ok());
    INFO("a Take blocked on its key was not woken when the tensor was filed");
    REQUIRE(WokenUp(take, inbox));
    auto t = take.get();
    REQUIRE(t.ok());
    CHECK(t->payload.size() == 8);
  }

  SECTION("a new attempt supersedes the key") {
    auto take = std::async(std::launch::async, [&] { return inbox.Take(Key(1, 1), kWaitSeconds); });
    REQUIRE(WaitForWaiters(inbox, 1));
    inbox.StartAttempt(2, 0);
    INFO("a Take blocked on a key of attempt 1 was not woken when attempt 2 started");
    REQUIRE(WokenUp(take, inbox));
    CHECK(take.get().status().code() == absl::StatusCode::kAborted);
  }

  SECTION("the inbox is closed") {
    auto take = std::async(std::launch::async, [&] { return inbox.Take(Key(1, 0), kWaitSeconds); });
    REQUIRE(WaitForWaiters(inbox, 1));
    inbox.Close("daemon shutting down");
    INFO("a Take blocked on its key was not woken when the inbox closed");
    // Close() is what WokenUp would call: here the guard only bounds the wait.
    REQUIRE(take.wait_for(kGuard) == std::future_status::ready);
    auto closed = take.get();
    CHECK(closed.status().code() == absl::StatusCode::kCancelled);
    CHECK_THAT(std::string(closed.status().message()), Catch::Contains("daemon shutting down"));
    CHECK(inbox.Put(Key(1, 0), Tensor(1)).code() == absl::StatusCode::kCancelled);
  }
  CHECK(inbox.waiters() == 0);
}

TEST_CASE("inbox: a full inbox holds a Put back until the stage takes something") {
  Inbox inbox(100);
  inbox.StartAttempt(1, 0);
  REQUIRE(inbox.Put(Key(1, 0, 0), Tensor(80)).ok());
  auto put = std::async(std::launch::async, [&] { return inbox.Put(Key(1, 0, 1), Tensor(50)); });
  REQUIRE(WaitForWaiters(inbox, 1));  // held back: 80 + 50 > 100
  CHECK(inbox.bytes() == 80);
  REQUIRE(inbox.Take(Key(1, 0, 0), 0).ok());  // frees room: the Put goes through
  INFO("a Put held back by a full inbox was not woken when a Take made room");
  REQUIRE(WokenUp(put, inbox));
  CHECK(put.get().ok());
  CHECK(inbox.bytes() == 50);
  // A tensor larger than the whole inbox is admitted once the inbox is empty.
  REQUIRE(inbox.Take(Key(1, 0, 1), 0).ok());
  CHECK(inbox.Put(Key(1, 0, 2), Tensor(500)).ok());
  CHECK(inbox.waiters() == 0);
}

}  // namespace
}  // namespace longhaul::daemon
