// The "cpu" backend's thread pool: ParallelFor(n, fn) runs fn(0..n-1) on the calling thread
// and the pool's workers, each index exactly once, and returns when all have run.
//
// Why not OpenMP: libgomp's idle threads spin for a while after every parallel region, and on
// a two-core machine they then compete with OpenBLAS's threads for the cores (a measured 33%
// loss on the sgemm that follows a parallel region). Its end-of-region barrier also waits
// for every thread of the team, so one thread descheduled by another process stalls the op
// for a whole time slice. Here workers spin only briefly, then sleep on a futex, and the
// caller waits only for indices actually claimed: if a worker is not running, the caller
// simply runs more indices itself.
//
// Which thread runs which index depends on timing, so callers make each index's result
// independent of that (disjoint outputs, fixed partitions); then results depend only on the
// inputs. ParallelFor may be called from several threads: a caller that finds the pool busy
// runs its indices itself.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace longhaul::kernels {

class ThreadPool {
 public:
  // `threads` >= 1 in all, the caller included (threads - 1 workers are started).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // REQUIRES: n < 2^32.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);

 private:
  struct Job {
    const std::function<void(size_t)>* fn = nullptr;
    uint32_t n = 0;
    uint32_t gen = 0;
  };

  void WorkerLoop();
  // Claims and runs indices of `job` until none are left (or a newer job replaced it).
  void RunClaims(const Job& job);

  const int threads_;
  std::vector<std::thread> workers_;
  std::atomic<bool> busy_{false};  // set while a caller's job is running
  std::mutex job_mu_;              // guards job_
  Job job_;
  // Generation of the current job (workers wait on it), and the claim state: the job's
  // generation in the high 32 bits, its next unclaimed index in the low 32.
  std::atomic<uint32_t> gen_{0};
  std::atomic<uint64_t> claim_{0};
  std::atomic<uint32_t> done_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace longhaul::kernels
