// Safetensors files: validation of the memory-mapped header, fp32 conversions, the atomic
// writer (see safetensors.h). The index and HfTensorSource are in safetensors_index.cc.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/file_env.h"
#include "common/json_load.h"
#include "model/file_io.h"

namespace longhaul::model {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;
constexpr char kMetadataKey[] = "__metadata__";

struct DtypeSpec {
  const char* name;
  int bits;
};

// Every dtype of the safetensors format; sub-byte ones are packed.
constexpr DtypeSpec kDtypes[] = {
    {"BOOL", 8},    {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16},    {"BF16", 16},
    {"I32", 32},    {"U32", 32}, {"F32", 32}, {"I64", 64},    {"U64", 64},
    {"F64", 64},    {"C64", 64}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

const DtypeSpec* FindDtype(const std::string& name) {
  for (const DtypeSpec& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::optional<StDtype> FloatDtype(const std::string& name) {
  for (StDtype d : {StDtype::kF32, StDtype::kF16, StDtype::kBF16}) {
    if (name == StDtypeName(d)) return d;
  }
  return std::nullopt;
}

int DtypeBytes(StDtype d) { return d == StDtype::kF32 ? 4 : 2; }

std::string ShapeString(const std::vector<int64_t>& shape) {
  if (shape.size() <= 16) return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
  return absl::StrCat("[", absl::StrJoin(shape.begin(), shape.begin() + 16, ", "), ", ... (",
                      shape.size(), " dims)]");
}

// Element count of a shape, or nullopt when its non-zero dimensions multiply past int64
// (refused even when another dimension is 0, so that any product of the dims is safe).
std::optional<int64_t> CheckedElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && __builtin_mul_overflow(n, d, &n))) return std::nullopt;
    zero |= d == 0;
  }
  return zero ? 0 : n;
}

Status Invalid(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("safetensors '", path, "': ", what));
}

// A name from the file for an error message, quoted and cut short.
std::string Quoted(const std::string& name) {
  return absl::StrCat("'", name.size() > 200 ? name.substr(0, 200) + "..." : name, "'");
}

std::string Decimal(unsigned __int128 v) {
  std::string s;
  do {
    s.insert(s.begin(), char('0' + int(v % 10)));
    v /= 10;
  } while (v != 0);
  return s;
}

// A JSON value for an error message, cut short.
std::string Snippet(const nlohmann::json& j) {
  std::string s = j.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

// A non-negative JSON integer (as int64), or nullopt.
std::optional<int64_t> NonNegativeInt(const nlohmann::json& j) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v <= uint64_t(std::numeric_limits<int64_t>::max())) return int64_t(v);
  }
  return std::nullopt;
}

}  // namespace

const char* StDtypeName(StDtype dtype) {
  switch (dtype) {
    case StDtype::kF32:
      return "F32";
    case StDtype::kF16:
      return "F16";
    case StDtype::kBF16:
      return "BF16";
  }
  return "?";
}

float Bf16ToFloat(uint16_t bits) { return std::bit_cast<float>(uint32_t(bits) << 16); }

uint16_t FloatToBf16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffff) > 0x7f800000) return uint16_t((x >> 16) | 0x0040);  // quiet NaN
  return uint16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);  // nearest even; overflow -> inf
}

float Fp16ToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000 | (mant << 13));  // inf, NaN
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);
  uint32_t e = 113;  // subnormal: mant * 2^-24, normalised
  while ((mant & 0x400) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ff) << 13));
}

uint16_t FloatToFp16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7e00 | uint16_t((a >> 13) & 0x3ff);  // quiet NaN
  uint32_t h, rem, half;
  if (a >= 0x38800000) {  // normal in fp16 (or overflow): rebias the exponent, drop 13 bits
    h = (a - 0x38000000) >> 13;
    rem = a & 0x1fff;
    half = 0x1000;
  } else {  // subnormal in fp16: the value in units of 2^-24
    const int shift = 126 - int(a >> 23);
    if (shift > 24) return sign;
    const uint32_t m = (a & 0x7fffff) | 0x800000;
    h = m >> shift;
    rem = m & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  }
  if (rem > half || (rem == half && (h & 1))) ++h;
  return sign | uint16_t(std::min<uint32_t>(h, 0x7c00));
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile);
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot read safetensors '", path, "'"));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot read safetensors '", path, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Invalid(path, "not a regular file");
  }
  if (st.st_size < 8) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat("safetensors '", path, "' is ", st.st_size,
                                            " bytes, shorter than its 8-byte header length"));
  }
  void* map = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map == MAP_FAILED) return ErrnoStatus(err, absl::StrCat("cannot map '", path, "'"));
  file->map_ = static_cast<const uint8_t*>(map);
  file->map_size_ = size_t(st.st_size);
  RETURN_IF_ERROR(file->Parse());
  return file;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

Status SafetensorsFile::Parse() {
  const std::string& p = path_;
  uint64_t n;
  std::memcpy(&n, map_, 8);
  const uint64_t after = map_size_ - 8;
  if (n > after) {
    return absl::DataLossError(absl::StrCat("safetensors '", p, "': header length ", n,
                                            " is more than the ", after,
                                            " bytes after the length field (truncated?)"));
  }
  if (n > kMaxHeaderBytes) {
    return Invalid(
        p, absl::StrCat("header length ", n, " is over the limit of ", kMaxHeaderBytes, " bytes"));
  }
  const int64_t data_begin = int64_t(8 + n);
  const int64_t data_size = int64_t(after - n);
  ASSIGN_OR_RETURN(const nlohmann::json header,
                   ParseUntrustedJson(reinterpret_cast<const char*>(map_) + 8, size_t(n),
                                      absl::StrCat("safetensors '", p, "': header")));
  if (!header.is_object()) {
    return Invalid(p, absl::StrCat("header is a JSON ", header.type_name(), ", not an object"));
  }
  std::vector<std::tuple<int64_t, int64_t, std::string>> ranges;  // begin, end, name
  for (const auto& [name, entry] : header.items()) {
    if (name == kMetadataKey) {
      if (!entry.is_object()) return Invalid(p, "\"__metadata__\" is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) {
          return Invalid(p, absl::StrCat("metadata value ", Quoted(key), " is a ",
                                         value.type_name(), ", not a string"));
        }
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string t = absl::StrCat("tensor ", Quoted(name));
    if (name.empty()) return Invalid(p, "a tensor has an empty name");
    if (!entry.is_object()) return Invalid(p, absl::StrCat(t, " is not a JSON object"));
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(key)) return Invalid(p, absl::StrCat(t, " has no \"", key, "\""));
    }
    if (entry.size() != 3) {
      for (const auto& [key, value] : entry.items()) {
        if (key != "dtype" && key != "shape" && key != "data_offsets")
          return Invalid(p, absl::StrCat(t, " has an unexpected key \"", key, "\""));
      }
    }
    StTensorInfo info;
    const nlohmann::json& dtype = entry.at("dtype");
    if (!dtype.is_string()) return Invalid(p, absl::StrCat(t, ": \"dtype\" is not a string"));
    info.dtype = dtype.get<std::string>();
    const DtypeSpec* spec = FindDtype(info.dtype);
    if (spec == nullptr)
      return Invalid(p, absl::StrCat(t, " has unknown dtype ", Quoted(info.dtype)));
    info.float_dtype = FloatDtype(info.dtype);
    const nlohmann::json& shape = entry.at("shape");
    if (!shape.is_array()) return Invalid(p, absl::StrCat(t, ": \"shape\" is not an array"));
    for (size_t i = 0; i < shape.size(); ++i) {
      const std::optional<int64_t> d = NonNegativeInt(shape[i]);
      if (!d) {
        return Invalid(p, absl::StrCat(t, ": shape dimension ", i, " (", Snippet(shape[i]),
                                       ") is not a non-negative 64-bit integer"));
      }
      info.shape.push_back(*d);
    }
    const std::optional<int64_t> elements = CheckedElements(info.shape);
    if (!elements) {
      return Invalid(p, absl::StrCat(t, ": shape ", ShapeString(info.shape),
                                     " multiplies out to 2^63 or more"));
    }
    info.num_elements = *elements;
    const nlohmann::json& offsets = entry.at("data_offsets");
    std::optional<int64_t> begin, end;
    if (offsets.is_array() && offsets.size() == 2) {
      begin = NonNegativeInt(offsets[0]);
      end = NonNegativeInt(offsets[1]);
    }
    if (!begin || !end) {
      return Invalid(p, absl::StrCat(t, ": \"data_offsets\" ", Snippet(offsets),
                                     " is not two non-negative integers"));
    }
    if (*begin > *end || *end > data_size) {
      return Invalid(p, absl::StrCat(t, ": data_offsets [", *begin, ", ", *end,
                                     "] are not a range inside the ", data_size, " bytes of data"));
    }
    info.file_offset = data_begin + *begin;
    info.num_bytes = *end - *begin;
    const unsigned __int128 bits = (unsigned __int128)info.num_elements * spec->bits;
    if (bits != (unsigned __int128)info.num_bytes * 8) {
      const std::string need = bits % 8 == 0 ? absl::StrCat(Decimal(bits / 8), " bytes")
                                             : absl::StrCat(Decimal(bits), " bits");
      return Invalid(p, absl::StrCat(t, ": shape ", ShapeString(info.shape), " of ", info.dtype,
                                     " needs ", need, " but data_offsets [", *begin, ", ", *end,
                                     "] hold ", info.num_bytes));
    }
    if (info.num_bytes > 0) ranges.emplace_back(*begin, *end, name);
    names_.push_back(name);
    tensors_.emplace(name, std::move(info));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const auto& [b0, e0, n0] = ranges[i - 1];
    const auto& [b1, e1, n1] = ranges[i];
    if (b1 < e0) {
      return Invalid(p, absl::StrCat("tensors ", Quoted(n0), " [", b0, ", ", e0, ") and ",
                                     Quoted(n1), " [", b1, ", ", e1, ") overlap"));
    }
  }
  return absl::OkStatus();  // names_ is sorted: the header's object is a std::map
}

const StTensorInfo* SafetensorsFile::Find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Status SafetensorsFile::ReadFloats(const std::string& name, float* out, size_t count) const {
  const StTensorInfo* info = Find(name);
  if (info == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("safetensors '", path_, "' has no tensor '", name, "'"));
  }
  if (!info->float_dtype) {
    return Invalid(path_, absl::StrCat("tensor '", name, "' has dtype ", info->dtype,
                                       ", which does not read as float (only F32, F16, BF16)"));
  }
  if (count != uint64_t(info->num_elements)) {
    return Invalid(path_, absl::StrCat("tensor '", name, "' has ", info->num_elements, " elements ",
                                       ShapeString(info->shape), ", not ", count));
  }
  const uint8_t* src = map_ + info->file_offset;
  if (*info->float_dtype == StDtype::kF32) {
    if (count > 0) std::memcpy(out, src, count * sizeof(float));
    return absl::OkStatus();
  }
  float (*convert)(uint16_t) = *info->float_dtype == StDtype::kBF16 ? Bf16ToFloat : Fp16ToFloat;
  for (size_t i = 0; i < count; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = convert(h);
  }
  return absl::OkStatus();
}

StatusOr<std::string> SafetensorsHeader(const std::vector<StTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata,
                                        const std::string& what) {
  const auto bad = [&what](const std::string& problem) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write safetensors '", what, "': ", problem));
  };
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::set<std::string> seen;
  int64_t offset = 0;
  for (const StTensor& t : tensors) {
    if (t.name.empty() || t.name == kMetadataKey) {
      return bad(absl::StrCat("tensor name '", t.name, "' is not allowed"));
    }
    if (!seen.insert(t.name).second) return bad(absl::StrCat("tensor '", t.name, "' twice"));
    const std::optional<int64_t> n = CheckedElements(t.shape);
    int64_t bytes = 0, end = 0;
    if (!n || __builtin_mul_overflow(*n, int64_t{DtypeBytes(t.dtype)}, &bytes) ||
        __builtin_add_overflow(offset, bytes, &end)) {
      return bad(absl::StrCat("tensor '", t.name, "' has an invalid or too large shape ",
                              ShapeString(t.shape)));
    }
    if (*n > 0 && t.data == nullptr) return bad(absl::StrCat("tensor '", t.name, "' has no data"));
    header[t.name] = {
        {"dtype", StDtypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string json;
  try {
    json = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return bad(absl::StrCat("a tensor name or metadata string is not UTF-8 (", e.what(), ")"));
  }
  json.append((8 - json.size() % 8) % 8, ' ');
  const uint64_t header_len = json.size();
  std::string out(sizeof(header_len), '\0');
  std::memcpy(out.data(), &header_len, sizeof(header_len));
  return out + json;
}

Status WriteSafetensorsTo(ByteSink& sink, const std::string& header,
                          const std::vector<StTensor>& tensors) {
  RETURN_IF_ERROR(sink.Write(header.data(), header.size()));
  std::vector<uint16_t> buf;
  for (const StTensor& t : tensors) {
    const size_t n = size_t(*CheckedElements(t.shape));
    if (t.dtype == StDtype::kF32) {
      RETURN_IF_ERROR(sink.Write(t.data, n * sizeof(float)));
      continue;
    }
    uint16_t (*convert)(float) = t.dtype == StDtype::kBF16 ? FloatToBf16 : FloatToFp16;
    constexpr size_t kChunk = size_t{1} << 16;
    for (size_t i = 0; i < n; i += kChunk) {
      const size_t m = std::min(kChunk, n - i);
      buf.resize(m);
      for (size_t j = 0; j < m; ++j) buf[j] = convert(t.data[i + j]);
      RETURN_IF_ERROR(sink.Write(buf.data(), m * sizeof(uint16_t)));
    }
  }
  return absl::OkStatus();
}

Status WriteSafetensors(const std::string& path, const std::vector<StTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(const std::string header, SafetensorsHeader(tensors, metadata, path));
  AtomicFileWriter writer;
  RETURN_IF_ERROR(writer.Open(path));
  RETURN_IF_ERROR(WriteSafetensorsTo(writer, header, tensors));
  return writer.Commit();
}

}  // namespace longhaul::model
