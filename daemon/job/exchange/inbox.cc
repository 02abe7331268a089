// Inbox (inbox.h): one job's incoming tensors, filed by key in a bounded window until the
// stage takes them.
#include "daemon/job/exchange/inbox.h"

#include <chrono>

namespace longhaul::daemon {

std::string TensorKey::DebugString() const {
  return "attempt " + std::to_string(attempt) + " step " + std::to_string(step) + " microbatch " +
         std::to_string(microbatch) + " kind " +
         v1::TensorKind_Name(static_cast<v1::TensorKind>(kind)) + " tensor " +
         std::to_string(tensor_id);
}

TensorKey KeyOf(const v1::TensorFrame& frame) {
  return {frame.attempt(), frame.step(), frame.microbatch(), static_cast<int>(frame.kind()),
          frame.tensor_id()};
}

Status Inbox::CheckKey(const TensorKey& key) const {
  MutexLock lock(mu_);
  return CheckKeyLocked(key);
}

Status Inbox::CheckKeyLocked(const TensorKey& key) const {
  if (closed_) return absl::CancelledError("inbox closed: " + close_reason_);
  if (key.attempt < attempt_) {
    return absl::FailedPreconditionError("stale tensor (" + key.DebugString() +
                                         "): the job is at attempt " + std::to_string(attempt_));
  }
  const bool next_attempt = key.attempt == attempt_ + 1;
  if ((key.attempt > attempt_ && !next_attempt) ||
      (key.attempt == attempt_ && key.step > step_ + kStepsAhead)) {
    return absl::OutOfRangeError("tensor (" + key.DebugString() +
                                 ") is outside what the stage takes now: attempt " +
                                 std::to_string(attempt_) + ", steps " + std::to_string(step_) +
                                 ".." + std::to_string(step_ + kStepsAhead));
  }
  return absl::OkStatus();
}

bool Inbox::PassedLocked(const TensorKey& key) const {
  const uint64_t lag = key.kind == v1::TENSOR_KIND_SYNC ? sync_lag_ : 0;
  return key.attempt == attempt_ && key.step + lag < step_;
}

void Inbox::SetSyncLag(uint64_t steps) {
  MutexLock lock(mu_);
  sync_lag_ = steps;
}

Status Inbox::Put(const TensorKey& key, ReceivedTensor tensor) {
  MutexLock lock(mu_);
  RETURN_IF_ERROR(CheckKeyLocked(key));
  if (PassedLocked(key)) {  // a step the stage has passed: a resend
    ++duplicates_;
    return absl::OkStatus();
  }
  const size_t size = tensor.payload.size();
  // A tensor larger than the whole inbox is admitted alone rather than never.
  ++waiters_;
  cv_.wait(mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || key.attempt < attempt_ || bytes_ == 0 || bytes_ + size <= capacity_;
  });
  --waiters_;
  if (closed_) return absl::CancelledError("inbox closed: " + close_reason_);
  if (key.attempt < attempt_) {
    return absl::FailedPreconditionError("stale tensor (" + key.DebugString() +
                                         "): the job is at attempt " + std::to_string(attempt_));
  }
  if (!seen_.insert(key).second) {
    ++duplicates_;
    return absl::OkStatus();
  }
  bytes_ += size;
  tensors_.emplace(key, std::move(tensor));
  cv_.notify_all();
  return absl::OkStatus();
}

StatusOr<ReceivedTensor> Inbox::Take(const TensorKey& key, double timeout_seconds) {
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(timeout_seconds * 1e6));
  ++waiters_;
  const bool ready = cv_.wait_until(mu_, deadline, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || key.attempt < attempt_ || tensors_.count(key) > 0;
  });
  --waiters_;
  if (closed_) return absl::CancelledError("inbox closed: " + close_reason_);
  if (key.attempt < attempt_) return absl::AbortedError("attempt superseded");
  if (!ready) {
    return absl::DeadlineExceededError("waited " + std::to_string(timeout_seconds) + " s for " +
                                       key.DebugString());
  }
  auto it = tensors_.find(key);
  ReceivedTensor t = std::move(it->second);
  bytes_ -= t.payload.size();
  tensors_.erase(it);
  cv_.notify_all();
  return t;
}

StatusOr<std::pair<TensorKey, ReceivedTensor>> Inbox::TakeAny(const std::vector<TensorKey>& keys,
                                                              double timeout_seconds) {
  if (keys.empty()) return absl::InvalidArgumentError("inbox: no key to wait for");
  MutexLock lock(mu_);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::microseconds(static_cast<int64_t>(timeout_seconds * 1e6));
  std::map<TensorKey, ReceivedTensor>::iterator found = tensors_.end();
  ++waiters_;
  const bool ready = cv_.wait_until(mu_, deadline, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (closed_ || keys[0].attempt < attempt_) return true;
    for (const TensorKey& k : keys) {
      found = tensors_.find(k);
      if (found != tensors_.end()) return true;
    }
    return false;
  });
  --waiters_;
  if (closed_) return absl::CancelledError("inbox closed: " + close_reason_);
  if (keys[0].attempt < attempt_) return absl::AbortedError("attempt superseded");
  if (!ready || found == tensors_.end()) {
    return absl::DeadlineExceededError("waited " + std::to_string(timeout_seconds) + " s for " +
                                       std::to_string(keys.size()) + " tensors from " +
                                       keys[0].DebugString());
  }
  std::pair<TensorKey, ReceivedTensor> out{found->first, std::move(found->second)};
  bytes_ -= out.second.payload.size();
  tensors_.erase(found);
  cv_.notify_all();
  return out;
}

void Inbox::AdvanceTo(uint64_t step) {
  MutexLock lock(mu_);
  if (step <= step_) return;
  step_ = step;
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    if (PassedLocked(it->first)) {
      bytes_ -= it->second.payload.size();
      it = tensors_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = seen_.begin(); it != seen_.end();) {
    it = PassedLocked(*it) ? seen_.erase(it) : std::next(it);
  }
  cv_.notify_all();
}

void Inbox::StartAttempt(uint32_t attempt, uint64_t first_step) {
  MutexLock lock(mu_);
  if (attempt <= attempt_ && !(attempt == 0 && attempt_ == 0)) return;
  attempt_ = attempt;
  step_ = first_step;
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    if (it->first.attempt < attempt) {
      bytes_ -= it->second.payload.size();
      it = tensors_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = seen_.begin(); it != seen_.end();) {
    it = it->attempt < attempt ? seen_.erase(it) : std::next(it);
  }
  cv_.notify_all();
}

void Inbox::Close(const std::string& reason) {
  MutexLock lock(mu_);
  closed_ = true;
  close_reason_ = reason;
  cv_.notify_all();
}

size_t Inbox::bytes() const {
  MutexLock lock(mu_);
  return bytes_;
}

uint64_t Inbox::duplicates() const {
  MutexLock lock(mu_);
  return duplicates_;
}

int Inbox::waiters() const {
  MutexLock lock(mu_);
  return waiters_;
}

}  // namespace longhaul::daemon
