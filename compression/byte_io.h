// Little-endian byte writing and bounds-checked reading for the wire format and codec
// payloads. ByteReader never reads past the span it was given: a read that does not fit
// returns an error naming what was being read and at which offset, so decoders built on it
// cannot over-read on truncated or hostile input.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compression/strings.h"

namespace longhaul::compression {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian and this code stores host words directly");

// Appends to a byte vector.
class ByteWriter {
 public:
  explicit ByteWriter(std::vector<uint8_t>* out) : out_(out) {}

  void U8(uint8_t v) { out_->push_back(v); }
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void F64(double v) { Raw(&v, sizeof(v)); }
  void Bytes(std::span<const uint8_t> bytes) { Raw(bytes.data(), bytes.size()); }
  // Grows the output by n bytes and returns a pointer to them (valid until the next write).
  uint8_t* Grow(size_t n) {
    size_t at = out_->size();
    out_->resize(at + n);
    return out_->data() + at;
  }
  size_t size() const { return out_->size(); }

 private:
  void Raw(const void* p, size_t n) {
    if (n == 0) return;
    std::memcpy(Grow(n), p, n);
  }
  std::vector<uint8_t>* out_;
};

// Reads from a span; every accessor fails instead of reading past the end.
class ByteReader {
 public:
  // `what` names the structure being read ("frame header"), for error messages.
  ByteReader(std::span<const uint8_t> bytes, std::string_view what) : bytes_(bytes), what_(what) {}

  Status U8(std::string_view field, uint8_t* v) { return Raw(field, v, sizeof(*v)); }
  Status U32(std::string_view field, uint32_t* v) { return Raw(field, v, sizeof(*v)); }
  Status U64(std::string_view field, uint64_t* v) { return Raw(field, v, sizeof(*v)); }
  Status I64(std::string_view field, int64_t* v) { return Raw(field, v, sizeof(*v)); }
  Status F64(std::string_view field, double* v) { return Raw(field, v, sizeof(*v)); }

  // The next n bytes as a span into the input.
  Status Bytes(std::string_view field, uint64_t n, std::span<const uint8_t>* out) {
    RETURN_IF_ERROR(Need(field, n));
    *out = bytes_.subspan(pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  // Everything not read yet.
  std::span<const uint8_t> Rest() const { return bytes_.subspan(pos_); }
  size_t remaining() const { return bytes_.size() - pos_; }
  size_t position() const { return pos_; }

  // Fails unless every byte has been read.
  Status ExpectEnd() const {
    if (remaining() == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        Cat(what_, ": ", remaining(), " unexpected trailing bytes at offset ", pos_));
  }

 private:
  Status Need(std::string_view field, uint64_t n) const {
    if (n <= remaining()) return absl::OkStatus();
    return absl::InvalidArgumentError(Cat(what_, ": truncated reading ", field, " at offset ", pos_,
                                          " (need ", n, " bytes, have ", remaining(), ")"));
  }
  Status Raw(std::string_view field, void* v, size_t n) {
    RETURN_IF_ERROR(Need(field, n));
    std::memcpy(v, bytes_.data() + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }

  std::span<const uint8_t> bytes_;
  std::string_view what_;
  size_t pos_ = 0;
};

}  // namespace longhaul::compression
