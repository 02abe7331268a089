// The windows a job trains and validates on, whatever its data: section names (job.h): the
// built-in corpus or a token or text file (read into memory), a token manifest (streamed
// shard by shard), or a weighted mixture of manifests. Checks that the data fits the model:
// file ids below the vocabulary; a manifest made with a tokenizer of the model's vocabulary
// size; one tokenizer across a mixture.
#pragma once

#include <memory>
#include <string>

#include "common/status.h"
#include "model/config.h"
#include "model/job.h"
#include "model/token_data.h"
#include "model/token_manifest.h"
#include "model/window_source.h"

namespace longhaul::model {

// The token stream a job's data key names: "builtin" (the built-in corpus; `builtin_seed` 1
// for training, 2 for validation) or a file path. Checks every token is below `vocab`;
// errors start with `context`.
StatusOr<std::shared_ptr<const TokenData>> LoadData(const std::string& spec, DataFormat format,
                                                    uint64_t builtin_seed, int vocab,
                                                    const std::string& context);

// Reads the manifest at `path` and checks it against `model`; errors start with `context`
// ("job.yaml: data.train").
StatusOr<TokenManifest> LoadJobManifest(const std::string& path, const ModelConfig& model,
                                        const std::string& context);

// data.train as windows of seq_len + 1 tokens, shuffled by job.seed.
StatusOr<std::unique_ptr<WindowSource>> JobTrainWindows(const Job& job, int seq_len);
// data.val (REQUIRES: not empty) in order; a manifest gives its val split.
StatusOr<std::unique_ptr<WindowSource>> JobValWindows(const Job& job, int seq_len);

}  // namespace longhaul::model
