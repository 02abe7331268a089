// Mutex and MutexLock: std::mutex and a scoped lock with Clang's thread-safety annotations, so
// that members marked ABSL_GUARDED_BY(mu_) and methods marked
// ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) or ABSL_LOCKS_EXCLUDED(mu_) are checked at compile time:
// clang with -Wthread-safety (the asan config, .bazelrc) reports a guarded member touched
// without its lock; gcc ignores the annotations. libstdc++'s std::mutex is not an annotated
// capability, hence the wrapper. The macros are abseil's (absl/base/thread_annotations.h).
//
// A condition variable waits on the Mutex itself: std::condition_variable_any with
// `cv_.wait(mu_, pred)` under a MutexLock (the analysis sees mu_ held throughout). The analysis
// checks a lambda on its own, so a wait predicate that reads guarded members says so:
// `[&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ...; }`.
#pragma once

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace longhaul {

// A std::mutex the analysis knows as a capability. BasicLockable (lock, unlock, try_lock).
class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool try_lock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope (std::lock_guard's part).
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace longhaul
