// Hugging Face safetensors files, read and written in C++ so that HF checkpoints load and
// export with no conversion step (DESIGN.md, "The model"). A file is an 8-byte little-endian
// header length N, N bytes of UTF-8 JSON mapping each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end]} (offsets from the first byte after the header) plus an
// optional "__metadata__" object of strings, then the data. Files come from outside and are
// validated as hostile input before anything is read from them; every error names the file
// and, where one is concerned, the tensor and the numbers involved.
//
// Sharded checkpoints (model.safetensors.index.json naming the shard of each tensor) are read
// through HfTensorSource, which opens a shard only when one of its tensors is asked for, so a
// pipeline stage that reads only its own layers touches only the shards holding them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/file_io.h"

namespace longhaul::model {

// The dtypes that convert to and from fp32. Files may hold others (I64, F64, U8, ...): they
// open, and reading them as float fails.
enum class StDtype { kF32, kF16, kBF16 };

// "F32", "F16", "BF16": the names used in the file.
const char* StDtypeName(StDtype dtype);

// One tensor of an opened file, as its header describes it (validated).
struct StTensorInfo {
  std::string dtype;                   // as in the file: "F32", "BF16", "I64", ...
  std::optional<StDtype> float_dtype;  // set when the dtype converts to fp32
  std::vector<int64_t> shape;          // empty for a scalar
  int64_t num_elements = 0;            // product of shape (1 for a scalar)
  int64_t file_offset = 0;             // first byte of the data, from the start of the file
  int64_t num_bytes = 0;               // data_offsets[1] - data_offsets[0]
};

// A safetensors file, memory-mapped read-only for as long as the object lives. Thread-safe
// for concurrent reads. The file must not be truncated in place while it is open (checkpoints
// are replaced by rename, never rewritten in place).
class SafetensorsFile {
 public:
  // Maps and validates `path`: the header length fits the file (and 100 MiB), the header is
  // a JSON object of well-typed entries, shapes multiply without overflow to the byte count
  // that data_offsets give, offsets lie inside the data, no two tensors overlap, metadata
  // values are strings, dtypes are known safetensors dtypes.
  static StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<std::string>& names() const { return names_; }  // sorted
  bool Has(const std::string& name) const { return tensors_.count(name) != 0; }
  // nullptr when there is no such tensor.
  const StTensorInfo* Find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Converts tensor `name` (F32, F16 or BF16) to fp32 into `out`. REQUIRES: `out` holds
  // `count` floats; `count` must equal the tensor's element count.
  Status ReadFloats(const std::string& name, float* out, size_t count) const;

 private:
  SafetensorsFile() = default;
  Status Parse();

  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, StTensorInfo> tensors_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: `data` holds product(shape) floats, converted to `dtype` on the way out.
struct StTensor {
  std::string name;
  StDtype dtype = StDtype::kF32;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Writes `tensors` (in the given order in the data section) and `metadata` to `path`
// atomically. Conversions round to nearest even; NaN stays NaN, overflow becomes inf. Names
// must be unique, non-empty, valid UTF-8 and not "__metadata__"; the header is padded with
// spaces to a multiple of 8 bytes.
// The file's header (the 8-byte length and the padded JSON); `what` names the file in
// errors. The whole file is the header, then the tensors' bytes in their dtypes.
StatusOr<std::string> SafetensorsHeader(const std::vector<StTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata,
                                        const std::string& what);
// Header, then the tensors converted to their dtypes, to `sink` (no file: an export).
Status WriteSafetensorsTo(ByteSink& sink, const std::string& header,
                          const std::vector<StTensor>& tensors);
Status WriteSafetensors(const std::string& path, const std::vector<StTensor>& tensors,
                        const std::map<std::string, std::string>& metadata);

// fp32 <-> bf16 / fp16 bit patterns, as the reader and writer convert them.
float Bf16ToFloat(uint16_t bits);
uint16_t FloatToBf16(float value);
float Fp16ToFloat(uint16_t bits);
uint16_t FloatToFp16(float value);

// Reads model.safetensors.index.json: {"metadata": {"total_size": N}, "weight_map":
// {tensor: shard file name}}. Returns the weight map. Every shard name must be a plain file
// name in the same directory ending in ".safetensors" (no '/', no "..").
StatusOr<std::map<std::string, std::string>> ReadSafetensorsIndex(const std::string& index_path);

// Writes an index as transformers does (sorted keys, 2-space indent), atomically.
// The index's JSON (`path` names it in errors), for a caller that sends it rather than
// writing it.
StatusOr<std::string> SafetensorsIndexJson(int64_t total_size,
                                           const std::map<std::string, std::string>& weight_map,
                                           const std::string& path);
Status WriteSafetensorsIndex(const std::string& path, int64_t total_size,
                             const std::map<std::string, std::string>& weight_map);

// The tensors of a Hugging Face model directory: dir/model.safetensors if it exists, else the
// shards named by dir/model.safetensors.index.json, each opened on first use. Thread-safe.
class HfTensorSource {
 public:
  static StatusOr<std::unique_ptr<HfTensorSource>> Open(const std::string& dir);

  const std::vector<std::string>& names() const { return names_; }  // sorted
  bool Has(const std::string& name) const { return shard_of_.count(name) != 0; }
  // The tensor's info, opening its shard if needed. NotFound for an unknown name; an error
  // when the index puts a tensor in a shard that does not hold it.
  StatusOr<const StTensorInfo*> Find(const std::string& name) const;
  Status ReadFloats(const std::string& name, float* out, size_t count) const;

 private:
  HfTensorSource() = default;
  StatusOr<const SafetensorsFile*> Shard(const std::string& name) const;

  std::string dir_, index_path_;
  std::map<std::string, std::string> shard_of_;  // tensor -> shard file name
  std::vector<std::string> names_;
  mutable std::mutex mu_;
  mutable std::map<std::string, std::unique_ptr<SafetensorsFile>> shards_;  // by file name
};

}  // namespace longhaul::model
