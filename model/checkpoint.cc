// llm.c GPT-2 checkpoint reading and atomic writing (see checkpoint.h).
#include "model/checkpoint.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "model/file_io.h"

namespace longhaul::model {
namespace {

constexpr int kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

}  // namespace

StatusOr<GPT2Config> ReadCheckpointConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const int64_t size, FileSize(path, "checkpoint"));
  if (size < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat("checkpoint '", path, "' is truncated: ", size,
                                            " bytes, shorter than the 1024-byte header"));
  }
  int32_t header[kHeaderInts];
  RETURN_IF_ERROR(ReadFileRange(path, "checkpoint", 0, header, kHeaderBytes));
  if (header[0] != kCheckpointMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not an llm.c GPT-2 checkpoint: bad magic ", header[0],
                     " (expected ", kCheckpointMagic, ")"));
  }
  if (header[1] != kCheckpointVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", path, "' has version ", header[1], "; only version ",
                     kCheckpointVersion, " (fp32 with padded vocabulary) is supported",
                     header[1] == 5 ? " (version 5 is llm.c's bf16 format)" : ""));
  }
  GPT2Config c;
  c.max_seq_len = header[2];
  c.vocab_size = header[3];
  c.num_layers = header[4];
  c.num_heads = header[5];
  c.channels = header[6];
  c.padded_vocab_size = header[7];
  c.residual_subspace = header[8];  // 0 in llm.c's files (and ours of the standard model)
  c.unconstrained_layers = header[9];
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

Status WriteCheckpoint(const std::string& path, const GPT2Config& config, const float* params) {
  RETURN_IF_ERROR(ValidateConfig(config));
  int32_t header[kHeaderInts] = {};
  header[0] = kCheckpointMagic;
  header[1] = kCheckpointVersion;
  header[2] = config.max_seq_len;
  header[3] = config.vocab_size;
  header[4] = config.num_layers;
  header[5] = config.num_heads;
  header[6] = config.channels;
  header[7] = config.padded_vocab_size;
  header[8] = config.residual_subspace;
  header[9] = config.unconstrained_layers;
  AtomicFileWriter writer;
  RETURN_IF_ERROR(writer.Open(path));
  RETURN_IF_ERROR(writer.Write(header, sizeof(header)));
  RETURN_IF_ERROR(writer.Write(params, NumParameters(config) * sizeof(float)));
  return writer.Commit();
}

Status CheckConfigMatches(const GPT2Config& expected, const GPT2Config& actual,
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
  if (diff.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("the model config does not fit checkpoint '",
                                                 checkpoint_path, "' (config vs checkpoint: ", diff,
                                                 ")"));
}

}  // namespace longhaul::model
