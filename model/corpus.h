// The built-in corpus: English-like text generated deterministically from a small grammar
// (subjects, verbs with agreement, objects, places, connectives), so demos and tests need
// no download. Read as bytes (vocabulary 256). A tiny model learns its spelling and word
// order within a hundred steps, so the loss visibly falls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace longhaul::model {

// `bytes` bytes of generated text; the same (seed, bytes) always gives the same text.
// The trainer uses seed 1 for training data and seed 2 for validation data.
std::string BuiltinCorpus(uint64_t seed, size_t bytes);

inline constexpr size_t kBuiltinCorpusBytes = 1 << 20;

}  // namespace longhaul::model
