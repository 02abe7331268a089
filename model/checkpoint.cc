// Model checkpoint reading and atomic writing: llm.c GPT-2 and llama (see checkpoint.h).
#include "model/checkpoint.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/file_io.h"

namespace longhaul::model {
namespace {

constexpr int kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

// The llama checkpoint's header after the GPT-2 fields (2..7): ints at 8..11, then floats
// and doubles stored bit for bit in consecutive ints.
enum LlamaField : int {
  kKvHeads = 8,
  kHeadDim = 9,
  kIntermediate = 10,
  kTied = 11,
  kNormEps = 12,     // float
  kRopeTheta = 13,   // double: 13, 14
  kRopeFactor = 15,  // double: 15, 16
  kRopeLow = 17,     // double: 17, 18
  kRopeHigh = 19,    // double: 19, 20
  kRopeOriginal = 21,
};

template <typename T>
T FromHeader(const int32_t* header, int at) {
  T v;
  std::memcpy(&v, header + at, sizeof(T));
  return v;
}
template <typename T>
void ToHeader(int32_t* header, int at, T v) {
  std::memcpy(header + at, &v, sizeof(T));
}

}  // namespace

StatusOr<ModelConfig> ReadCheckpointConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const int64_t size, FileSize(path, "checkpoint"));
  if (size < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "' is truncated: ", size,
                                            " bytes, shorter than the 1024-byte header"));
  }
  int32_t header[kHeaderInts];
  RETURN_IF_ERROR(ReadFileRange(path, "checkpoint", 0, header, kHeaderBytes));
  const bool llama = header[0] == kLlamaCheckpointMagic;
  if (header[0] != kCheckpointMagic && !llama) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' is not a model checkpoint: bad magic ", header[0], " (expected ",
        kCheckpointMagic, " for llm.c's GPT-2 or ", kLlamaCheckpointMagic, " for a llama)"));
  }
  if (llama && header[1] != kLlamaCheckpointVersion) {
    return absl::InvalidArgumentError(absl::StrCat("llama checkpoint '", path, "' has version ",
                                                   header[1], "; only version ",
                                                   kLlamaCheckpointVersion, " is supported"));
  }
  if (!llama && header[1] != kCheckpointVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", path, "' has version ", header[1], "; only version ",
                     kCheckpointVersion, " (fp32 with padded vocabulary) is supported",
                     header[1] == 5 ? " (version 5 is llm.c's bf16 format)" : ""));
  }
  ModelConfig c;
  c.max_seq_len = header[2];
  c.vocab_size = header[3];
  c.num_layers = header[4];
  c.num_heads = header[5];
  c.channels = header[6];
  c.padded_vocab_size = header[7];
  if (llama) {
    c.family = Family::kLlama;
    c.num_kv_heads = header[kKvHeads];
    c.head_dim = header[kHeadDim];
    c.intermediate_size = header[kIntermediate];
    c.tied_embeddings = header[kTied] != 0;
    c.norm_eps = FromHeader<float>(header, kNormEps);
    c.rope_theta = FromHeader<double>(header, kRopeTheta);
    c.rope_scaling.factor = FromHeader<double>(header, kRopeFactor);
    c.rope_scaling.low_freq_factor = FromHeader<double>(header, kRopeLow);
    c.rope_scaling.high_freq_factor = FromHeader<double>(header, kRopeHigh);
    c.rope_scaling.original_context = header[kRopeOriginal];
  } else {
    c.residual_subspace = header[8];  // 0 in llm.c's files (and ours of the standard model)
    c.unconstrained_layers = header[9];
  }
  RETURN_IF_ERROR(Annotate(ValidateConfig(c), absl::StrCat("checkpoint '", path, "'")));
  const int64_t expected = kHeaderBytes + NumParameters(c) * int64_t(sizeof(float));
  if (size != expected) {
    return absl::DataLossError(absl::StrCat(
        "checkpoint '", path, "' has ", size, " bytes but its header (", c.DebugString(),
        ") needs ", expected, size < expected ? " (truncated)" : " (trailing bytes)"));
  }
  return c;
}

StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  Checkpoint ckpt;
  ASSIGN_OR_RETURN(ckpt.config, ReadCheckpointConfig(path));
  ckpt.params.resize(NumParameters(ckpt.config));
  RETURN_IF_ERROR(ReadFileRange(path, "checkpoint", kHeaderBytes, ckpt.params.data(),
                                ckpt.params.size() * sizeof(float)));
  return ckpt;
}

int64_t CheckpointBytes(const ModelConfig& config) {
  return int64_t{kHeaderInts} * int64_t(sizeof(int32_t)) +
         NumParameters(config) * int64_t(sizeof(float));
}

Status WriteCheckpoint(const std::string& path, const ModelConfig& config, const float* params) {
  AtomicFileWriter writer;
  RETURN_IF_ERROR(writer.Open(path));
  RETURN_IF_ERROR(WriteCheckpointTo(writer, config, params));
  return writer.Commit();
}

Status WriteCheckpointTo(ByteSink& sink, const ModelConfig& config, const float* params) {
  RETURN_IF_ERROR(ValidateConfig(config));
  int32_t header[kHeaderInts] = {};
  const bool llama = config.family == Family::kLlama;
  header[0] = llama ? kLlamaCheckpointMagic : kCheckpointMagic;
  header[1] = llama ? kLlamaCheckpointVersion : kCheckpointVersion;
  header[2] = config.max_seq_len;
  header[3] = config.vocab_size;
  header[4] = config.num_layers;
  header[5] = config.num_heads;
  header[6] = config.channels;
  header[7] = config.padded_vocab_size;
  if (llama) {
    header[kKvHeads] = config.num_kv_heads;
    header[kHeadDim] = config.head_dim;
    header[kIntermediate] = config.intermediate_size;
    header[kTied] = config.tied_embeddings ? 1 : 0;
    ToHeader(header, kNormEps, config.norm_eps);
    ToHeader(header, kRopeTheta, config.rope_theta);
    ToHeader(header, kRopeFactor, config.rope_scaling.factor);
    ToHeader(header, kRopeLow, config.rope_scaling.low_freq_factor);
    ToHeader(header, kRopeHigh, config.rope_scaling.high_freq_factor);
    header[kRopeOriginal] = config.rope_scaling.original_context;
  } else {
    header[8] = config.residual_subspace;
    header[9] = config.unconstrained_layers;
  }
  RETURN_IF_ERROR(sink.Write(header, sizeof(header)));
  return sink.Write(params, NumParameters(config) * sizeof(float));
}

Status CheckConfigMatches(const ModelConfig& expected, const ModelConfig& actual,
                          const std::string& checkpoint_path) {
  std::string diff;
  auto field = [&diff](const char* name, int want, int got) {
    if (want != got) absl::StrAppend(&diff, diff.empty() ? "" : ", ", name, " ", want, " vs ", got);
  };
  field("layers", expected.num_layers, actual.num_layers);
  field("channels", expected.channels, actual.channels);
  field("heads", expected.num_heads, actual.num_heads);
  field("vocab", expected.vocab_size, actual.vocab_size);
  field("padded vocab", expected.padded_vocab_size, actual.padded_vocab_size);
  field("context", expected.max_seq_len, actual.max_seq_len);
  field("residual_subspace", expected.residual_subspace, actual.residual_subspace);
  field("unconstrained_layers", expected.unconstrained_layers, actual.unconstrained_layers);
  if (expected.family != actual.family) {
    absl::StrAppend(&diff, diff.empty() ? "" : ", ", "family ", FamilyName(expected.family), " vs ",
                    FamilyName(actual.family));
  } else if (expected.family == Family::kLlama && !(expected == actual)) {
    absl::StrAppend(&diff, diff.empty() ? "" : ", ", "llama shape ", expected.DebugString(), " vs ",
                    actual.DebugString());
  }
  if (diff.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the model config does not fit checkpoint '",
                                                 checkpoint_path, "' (config vs checkpoint: ", diff,
                                                 ")"));
}

}  // namespace longhaul::model
