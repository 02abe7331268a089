// Inbox: where one job's incoming tensors wait for the stage executor. Frames arrive on Peer
// SendFrames streams (one tensor may span several chunks); once a tensor is whole and its
// frame's checksum holds, it is filed under its key until the executor takes it. The inbox is
// bounded in bytes: a sender that runs ahead is held back (the gRPC stream stops being
// read, so TCP pushes back) rather than growing memory. Duplicates (a sender retrying after
// a dropped connection) are recognised by key and dropped, so nothing is processed twice.
#pragma once

#include <compare>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

struct TensorKey {
  uint32_t attempt = 0;
  uint64_t step = 0;
  uint32_t microbatch = 0;
  int kind = 0;  // v1::TensorKind
  uint32_t tensor_id = 0;
  auto operator<=>(const TensorKey&) const = default;
  std::string DebugString() const;
};

TensorKey KeyOf(const v1::TensorFrame& frame);

struct ReceivedTensor {
  std::string from_site;
  std::vector<uint8_t> payload;  // the encoded tensor: a whole compression frame
};

class Inbox {
 public:
  explicit Inbox(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Files a whole tensor. Blocks while the inbox is over capacity, until space frees up,
  // the attempt is superseded or the inbox is closed. A key seen before is dropped (OK); a
  // key CheckKey refuses is refused.
  Status Put(const TensorKey& key, ReceivedTensor tensor) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits for `key`. Fails when the inbox is closed or the key's attempt is superseded, or
  // when `timeout_seconds` pass (DEADLINE_EXCEEDED).
  StatusOr<ReceivedTensor> Take(const TensorKey& key, double timeout_seconds)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Waits for whichever of `keys` (all of one attempt) is filed first and takes it: a receiver
  // of many tensors takes them as they come, so that senders running ahead of the others
  // cannot fill the inbox with tensors it does not take yet. Fails as Take does.
  StatusOr<std::pair<TensorKey, ReceivedTensor>> TakeAny(const std::vector<TensorKey>& keys,
                                                         double timeout_seconds)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Whether a tensor with `key` may be filed now: FailedPrecondition for an attempt before
  // the current one, OutOfRange for one after the next attempt or, in the current attempt,
  // for a step more than kStepsAhead beyond the step the stage is at (an honest neighbour is
  // at most one step ahead: the step barrier). A step the stage has passed is a resend, taken
  // and dropped. So nothing can sit in the inbox that the stage will never take.
  Status CheckKey(const TensorKey& key) const ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr uint64_t kStepsAhead = 2;

  // Drops everything of attempts before `attempt` and refuses them from now on; the stage
  // starts at `first_step`.
  void StartAttempt(uint32_t attempt, uint64_t first_step = 0) ABSL_LOCKS_EXCLUDED(mu_);
  // The stage runs `step` now: tensors of earlier steps are dropped and refused, sync frames
  // (TENSOR_KIND_SYNC) only once they are more than the sync lag behind.
  void AdvanceTo(uint64_t step) ABSL_LOCKS_EXCLUDED(mu_);
  // Streaming syncs (sync.overlap): a sync's frames are taken up to `steps` steps after the
  // step that sent them.
  void SetSyncLag(uint64_t steps) ABSL_LOCKS_EXCLUDED(mu_);
  // Wakes every waiter with an error; later Puts and Takes fail.
  void Close(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_);

  size_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t capacity() const { return capacity_; }
  uint64_t duplicates() const ABSL_LOCKS_EXCLUDED(mu_);
  // How many calls (Put, Take, TakeAny) are blocked waiting right now. A test seam: a test
  // waits for its waiter to be blocked before it files, takes, supersedes or closes, so that
  // the wake-up it checks is a real one (a missing notify then hangs the waiter instead of
  // passing because the waiter came late).
  int waiters() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Status CheckKeyLocked(const TensorKey& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Of the current attempt, behind the stage.
  bool PassedLocked(const TensorKey& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const size_t capacity_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;  // waits on mu_
  std::map<TensorKey, ReceivedTensor> tensors_ ABSL_GUARDED_BY(mu_);
  std::set<TensorKey> seen_ ABSL_GUARDED_BY(mu_);  // every key ever filed in the current attempt
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t attempt_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t step_ ABSL_GUARDED_BY(mu_) = 0;  // the step the stage is at, in attempt_
  uint64_t sync_lag_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::string close_reason_ ABSL_GUARDED_BY(mu_);
  uint64_t duplicates_ ABSL_GUARDED_BY(mu_) = 0;
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;  // calls inside cv_.wait* (see waiters())
};

}  // namespace longhaul::daemon
