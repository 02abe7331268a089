// `longhaul data prepare`: text files and JSON lines to token shards and a manifest
// (model/token_manifest.h), with the model's own tokenizer.
//
//   - Documents: a JSON line's `field` (a string), or a whole text file; each is written as
//     [BOS if the tokenizer has one] ids [end-of-text], special-token strings inside documents
//     being ordinary text (an untrusted document cannot forge an end-of-text).
//   - Validation split: each piece (document_reader.h) goes to "val" with probability
//     val_fraction, drawn from (seed, piece number): the same input always splits the same way.
//   - Shards: a split's shard is written (atomically, as an llm.c token file) once it holds at
//     least shard_tokens tokens, at a piece boundary; uint16 ids where the vocabulary fits.
//   - Parallel: pieces are encoded by `threads` workers in rounds and written in input order,
//     so the output does not depend on the thread count.
//   - Resumable: after each train shard the run's position, counts and the validation tokens
//     not yet in a shard are saved in OUT/.prepare/; a run with the same inputs and options
//     continues from there, and one with different ones is refused.
//   - Bad input (malformed JSON, a line that is not an object, a missing or non-string field,
//     a line over kMaxJsonLineBytes) is skipped, counted per reason and per source, and
//     reported with file and line (the first max_examples in the manifest); invalid UTF-8
//     becomes U+FFFD and is counted. max_bad_documents turns skipping into failure.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/tokenizer.h"
#include "model/token_manifest.h"

namespace longhaul::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and directories (document_reader.h)
  std::string out_dir;
  std::string json_field = "text";
  double val_fraction = 0.005;
  uint64_t seed = 0;
  int64_t shard_tokens = 100'000'000;
  size_t text_piece_bytes = size_t{1} << 20;
  // How far past a piece's size to look for a line break before cutting anyway (tests).
  size_t text_scan_bytes = size_t{64} << 20;
  int threads = 1;
  int token_bits = 0;  // 16, 32, or 0: 16 where the vocabulary fits
  // Fail (after the run) when more documents than this were bad; -1: never.
  int64_t max_bad_documents = -1;
  size_t max_examples = 100;
  // Start over: remove OUT's manifest, shards and interrupted state first. Without it, an OUT
  // that holds a finished manifest is refused.
  bool force = false;
  // Fault injection (tests): stop with Aborted right after the Nth train shard and its
  // saved state, as a crash there would leave OUT.
  int64_t crash_after_train_shards = -1;
};

// The tokenizer and what the manifest says about it.
struct PrepareTokenizer {
  const Tokenizer* tokenizer = nullptr;
  model::ManifestTokenizer info;  // name, kind, sha256; vocab and eot are filled in from it
  std::optional<TokenId> bos_id;  // written before each document (Llama 3's <|begin_of_text|>)
};

struct PrepareProgress {
  int64_t bytes_done = 0, bytes_total = 0;
  int64_t tokens = 0;
  int64_t documents = 0;
  double seconds = 0;
};

struct PrepareResult {
  model::TokenManifest manifest;
  bool resumed = false;
  int64_t bytes = 0;              // input bytes tokenized by this run
  double seconds = 0;             // this run's
  double encode_cpu_seconds = 0;  // worker time spent encoding
};

// Runs the preparation. `progress` (may be empty) is called after each round.
StatusOr<PrepareResult> PrepareData(const PrepareOptions& options, const PrepareTokenizer& tok,
                                    const std::function<void(const PrepareProgress&)>& progress);

}  // namespace longhaul::data
