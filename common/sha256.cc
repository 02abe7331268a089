#include "common/sha256.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace longhaul {

struct Sha256::Context {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : context_(std::make_unique<Context>()) {
  context_->ctx = EVP_MD_CTX_new();
  if (context_->ctx == nullptr || EVP_DigestInit_ex(context_->ctx, EVP_sha256(), nullptr) != 1) {
    std::abort();  // out of memory inside OpenSSL: nothing sensible to return
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(context_->ctx); }

void Sha256::Update(const void* data, size_t n) {
  if (n > 0) EVP_DigestUpdate(context_->ctx, data, n);
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context_->ctx, digest, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

std::string Sha256Hex(std::string_view bytes) {
  Sha256 h;
  h.Update(bytes);
  return h.HexDigest();
}

StatusOr<std::string> Sha256OfFile(const std::string& path, const std::string& what,
                                   int64_t length) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", what, " '", path, "': ", std::strerror(errno)));
  }
  Sha256 h;
  std::vector<char> buffer(size_t{1} << 20);
  int64_t done = 0;
  while (length < 0 || done < length) {
    size_t want = buffer.size();
    if (length >= 0) want = static_cast<size_t>(std::min<int64_t>(want, length - done));
    const size_t got = std::fread(buffer.data(), 1, want, f);
    if (got == 0) break;
    h.Update(buffer.data(), got);
    done += static_cast<int64_t>(got);
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::DataLossError(absl::StrCat("cannot read ", what, " '", path, "'"));
  if (length >= 0 && done < length) {
    return absl::DataLossError(absl::StrCat(what, " '", path, "' is ", done,
                                            " bytes, shorter than the ", length, " expected"));
  }
  return h.HexDigest();
}

}  // namespace longhaul
