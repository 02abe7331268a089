// SHA-256 (OpenSSL's) for the hashes people compare by hand with sha256sum: the files a
// token manifest was made from, its shards and its tokenizer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace longhaul {

// Incremental SHA-256. Not copyable; Update any number of times, then HexDigest once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(const void* data, size_t n);
  void Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }
  // The digest as 64 lowercase hex digits. REQUIRES: called once.
  std::string HexDigest();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

// SHA-256 of `bytes`, 64 lowercase hex digits.
std::string Sha256Hex(std::string_view bytes);

// SHA-256 of the first `length` bytes of `path` (-1: the whole file), read in pieces.
// Errors name the file: "cannot read WHAT 'PATH': reason", or a file shorter than `length`.
StatusOr<std::string> Sha256OfFile(const std::string& path, const std::string& what,
                                   int64_t length = -1);

}  // namespace longhaul
