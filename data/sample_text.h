// Deterministic text for tokenizer tests and benchmarks, generated so that nothing needs a
// download: English-like prose with the variety that byte-level BPE meets in real text
// (common and rare words, names, capitals, contractions and possessives, numbers, dates,
// prices, punctuation, quotes, URLs, code, whitespace runs, CRLF), and a fixed set of lines in
// other scripts (Chinese, Japanese, Korean, Arabic, Hebrew, Hindi, Thai, Cyrillic, Greek,
// accented Latin precomposed and decomposed), emoji with skin tones, flags and ZWJ
// sequences, Unicode spaces and digits, and special-token strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace longhaul::data {

// About `bytes` bytes (cut at a line end at or after that size) of English-like prose;
// the same (seed, bytes) always gives the same text.
std::string EnglishSampleText(uint64_t seed, size_t bytes);

// The fixed multilingual and edge-case lines (no line holds '\n').
const std::vector<std::string>& MultilingualSampleLines();

// EnglishSampleText with one of MultilingualSampleLines after every `every` lines (each of
// them at least once), for tests that want every kind of text in one corpus.
std::string MixedSampleText(uint64_t seed, size_t bytes, size_t every = 40);

}  // namespace longhaul::data
