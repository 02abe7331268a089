// Checkpoint evaluation (see evaluate.h).
#include "model/evaluate.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "kernels/ops.h"
#include "model/chain.h"
#include "model/checkpoint.h"
#include "model/corpus.h"
#include "model/data_loader.h"
#include "model/init_from.h"
#include "model/job.h"

namespace longhaul::model {

StatusOr<EvalResult> EvaluateCheckpoint(const EvalOptions& options) {
  if (options.batch_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch size must be positive, got ", options.batch_size));
  }
  if (options.batches < 0 || options.seq_len < 0) {
    return absl::InvalidArgumentError("batches and sequence length must not be negative");
  }
  // A checkpoint file or a Hugging Face model directory (model/init_from.h).
  ASSIGN_OR_RETURN(const auto source, InitSource::Open(options.checkpoint));
  const ModelConfig& config = source->config();
  EvalResult result;
  result.config = config;
  result.batch_size = options.batch_size;
  result.seq_len = options.seq_len > 0 ? options.seq_len : std::min(config.max_seq_len, 1024);
  if (result.seq_len > config.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("sequence length ", result.seq_len,
                                                   " exceeds the checkpoint's context of ",
                                                   config.max_seq_len));
  }
  // "builtin": the built-in corpus's validation text (what a job's `val: builtin` reads).
  TokenData data;
  if (options.data == kBuiltinData) {
    data = TokensFromText(BuiltinCorpus(2, kBuiltinCorpusBytes / 8), kBuiltinData);
  } else {
    ASSIGN_OR_RETURN(data, ReadTokenData(options.data, options.format));
  }
  RETURN_IF_ERROR(CheckTokensFit(data, config.vocab_size));
  result.data_tokens = int64_t(data.tokens.size());
  DataLoaderOptions lo;
  lo.batch_size = options.batch_size;
  lo.seq_len = result.seq_len;
  lo.shuffle = false;
  ASSIGN_OR_RETURN(auto loader,
                   DataLoader::Create(std::make_shared<const TokenData>(std::move(data)), lo));
  const int64_t available = loader->batches_per_epoch();
  if (available == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data '", options.data, "' holds ", loader->num_windows(), " sequences of ",
                     result.seq_len, "+1 tokens, fewer than one batch of ", options.batch_size));
  }
  result.batches =
      int(options.batches == 0 ? available : std::min<int64_t>(options.batches, available));
  ASSIGN_OR_RETURN(auto ops, kernels::MakeOps(options.backend, options.threads));
  ChainOptions co;
  co.batch_size = options.batch_size;
  co.seq_len = result.seq_len;
  co.training = false;
  ASSIGN_OR_RETURN(auto chain, FragmentChain::Create(config, co, ops.get()));
  RETURN_IF_ERROR(source->LoadInto(*chain));
  ASSIGN_OR_RETURN(result.mean_loss, chain->MeanLoss(*loader, result.batches));
  return result;
}

}  // namespace longhaul::model
