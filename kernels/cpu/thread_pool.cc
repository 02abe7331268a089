// ThreadPool: claim-based parallel loops with brief spinning, then futex sleep; see the header.
#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>

namespace longhaul::kernels {
namespace {

// About 20-50 microseconds of pause instructions: long enough to catch the next op of a
// training step without a wake-up, short enough not to starve other processes for long.
constexpr int kWorkerSpins = 4000;
constexpr int kCallerSpins = 2000;

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(threads < 1 ? 1 : threads) {
  workers_.reserve(threads_ - 1);
  for (int i = 1; i < threads_; i++) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  gen_.fetch_add(1);
  gen_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  bool idle = false;
  if (threads_ == 1 || n == 1 || !busy_.compare_exchange_strong(idle, true)) {
    for (size_t i = 0; i < n; i++) fn(i);
    return;
  }
  Job job;
  {
    std::lock_guard<std::mutex> lock(job_mu_);
    job = Job{&fn, static_cast<uint32_t>(n), job_.gen + 1};
    job_ = job;
    done_.store(0, std::memory_order_relaxed);
    claim_.store(static_cast<uint64_t>(job.gen) << 32, std::memory_order_release);
    gen_.store(job.gen, std::memory_order_release);
  }
  gen_.notify_all();
  RunClaims(job);
  // Wait only for indices that workers claimed and are still running.
  for (int spins = 0; done_.load(std::memory_order_acquire) < job.n; spins++) {
    if (spins < kCallerSpins) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
  busy_.store(false, std::memory_order_release);
}

void ThreadPool::RunClaims(const Job& job) {
  uint64_t cur = claim_.load(std::memory_order_acquire);
  for (;;) {
    if (static_cast<uint32_t>(cur >> 32) != job.gen) return;
    const uint32_t i = static_cast<uint32_t>(cur);
    if (i >= job.n) return;
    // A successful claim proves the job is still running, so job.fn is alive.
    if (claim_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) {
      (*job.fn)(i);
      done_.fetch_add(1, std::memory_order_release);
      cur = claim_.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::WorkerLoop() {
  uint32_t seen = 0;
  for (;;) {
    for (int spins = 0; spins < kWorkerSpins && gen_.load(std::memory_order_acquire) == seen;
         spins++) {
      _mm_pause();
    }
    gen_.wait(seen, std::memory_order_acquire);
    if (stop_.load()) return;
    Job job;
    {
      std::lock_guard<std::mutex> lock(job_mu_);
      job = job_;
    }
    seen = job.gen;
    RunClaims(job);
  }
}

}  // namespace longhaul::kernels
