// Mean loss of an llm.c checkpoint on a data file: what `longhaul eval` runs. Batches are
// taken in file order (no shuffling) from the start of the data.
#pragma once

#include <string>

#include "common/status.h"
#include "model/config.h"
#include "model/token_data.h"

namespace longhaul::model {

struct EvalOptions {
  std::string checkpoint;  // llm.c GPT-2 checkpoint
  std::string data;        // llm.c token file or text
  DataFormat format = DataFormat::kAuto;
  int batches = 20;  // 0: every full batch in the file; more than the file has: all
  int batch_size = 4;
  int seq_len = 0;  // 0: the model's context, at most 1024
  std::string backend = "cpu";
  int threads = 0;  // 0: all cores
};

struct EvalResult {
  ModelConfig config;
  float mean_loss = 0;
  int batches = 0;  // batches actually evaluated
  int batch_size = 0;
  int seq_len = 0;
  int64_t data_tokens = 0;
};

// Errors: unreadable or invalid checkpoint or data, tokens outside the model's vocabulary,
// a sequence length above the model's context, data shorter than one batch.
StatusOr<EvalResult> EvaluateCheckpoint(const EvalOptions& options);

}  // namespace longhaul::model
