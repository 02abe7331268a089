// ThreadPool: every index runs exactly once, for any size and thread count, from one caller or
// several at once, and the pool shuts down cleanly.
#include "kernels/cpu/thread_pool.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

namespace longhaul::kernels {
namespace {

TEST_CASE("ParallelFor runs every index exactly once", "[kernels][pool]") {
  const int threads = GENERATE(1, 2, 3, 8);
  ThreadPool pool(threads);
  CHECK(pool.threads() == threads);
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{1000}}) {
    for (int rep = 0; rep < 50; rep++) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](size_t i) { hits[i].fetch_add(1); });
      int bad = 0;
      for (auto& h : hits) bad += h.load() != 1;
      REQUIRE(bad == 0);
    }
  }
}

TEST_CASE("ParallelFor from several callers at once", "[kernels][pool]") {
  ThreadPool pool(3);
  std::atomic<long> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; c++) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; rep++) {
        pool.ParallelFor(37, [&](size_t i) { total.fetch_add(static_cast<long>(i)); });
      }
    });
  }
  for (auto& t : callers) t.join();
  CHECK(total.load() == 4L * 200 * (36 * 37 / 2));
}

TEST_CASE("Nested ParallelFor runs inline", "[kernels][pool]") {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  pool.ParallelFor(4, [&](size_t) { pool.ParallelFor(5, [&](size_t) { count.fetch_add(1); }); });
  CHECK(count.load() == 20);
}

TEST_CASE("Pools start and stop repeatedly", "[kernels][pool]") {
  for (int i = 0; i < 20; i++) {
    ThreadPool pool(4);
    if (i % 2 == 0) pool.ParallelFor(10, [](size_t) {});
  }
}

}  // namespace
}  // namespace longhaul::kernels
