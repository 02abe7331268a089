// Per-thread piece caches (see piece_cache.h).
#include "data/piece_cache.h"

#include <array>
#include <atomic>

namespace longhaul::data {
namespace {

std::atomic<uint64_t> next_serial{1};

}  // namespace

PieceCache& PieceCache::ForThread(uint64_t serial) {
  constexpr size_t kCaches = 4;
  thread_local std::array<PieceCache, kCaches> caches;
  thread_local size_t next_victim = 0;
  for (PieceCache& cache : caches) {
    if (cache.owner_ == serial) return cache;
  }
  PieceCache& cache = caches[next_victim];
  next_victim = (next_victim + 1) % kCaches;
  cache.owner_ = serial;
  cache.ids_.clear();
  return cache;
}

uint64_t NewPieceCacheSerial() { return next_serial.fetch_add(1); }

}  // namespace longhaul::data
