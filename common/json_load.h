// Parsing a JSON text that may be hostile (a safetensors header, a checkpoint index from the
// Hugging Face hub): errors come back as a Status naming what was parsed, the parser's
// message and the byte where it stopped; nesting deeper than any of our formats needs is
// refused before nlohmann-json builds anything (a megabyte of "[" would otherwise cost tens
// of bytes of tree per byte of text); a key that appears twice in one object is an error
// (readers that keep the first and those that keep the last would see different files).
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace longhaul {

inline constexpr int kMaxJsonDepth = 64;

// Parses `n` bytes at `data` as one JSON value (surrounding whitespace allowed). Errors read
// "WHAT is not valid JSON (byte B of N): ...", "WHAT nests deeper than 64 levels (byte B)"
// or "WHAT has key 'K' twice in one object".
StatusOr<nlohmann::json> ParseUntrustedJson(const char* data, size_t n, const std::string& what);

}  // namespace longhaul
