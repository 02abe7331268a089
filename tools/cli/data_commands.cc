// Thin CLI wrappers over data/prepare.h and model/token_manifest.h: parse flags, show
// progress (a bar on a terminal, a line every 10% otherwise), print results.
#include "tools/cli/data_commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/prepare.h"
#include "data/tokenizer_files.h"
#include "model/token_manifest.h"

namespace longhaul::cli {
namespace {

int Fail(const Status& status) {
  std::cerr << "longhaul: " << status.message() << "\n";
  if (absl::IsInvalidArgument(status) || absl::IsAlreadyExists(status) ||
      absl::IsFailedPrecondition(status)) {
    return kExitUsage;
  }
  return absl::IsNotFound(status) ? kExitNotFound : kExitError;
}

std::string Count(int64_t n) {
  if (n >= 10'000'000'000) return absl::StrFormat("%.1fG", n / 1e9);
  if (n >= 10'000'000) return absl::StrFormat("%.1fM", n / 1e6);
  if (n >= 100'000) return absl::StrFormat("%.1fk", n / 1e3);
  return absl::StrCat(n);
}

struct PrepareFlags {
  data::PrepareOptions options;
  std::string tokenizer, encoding;
  bool quiet = false;
};

int Prepare(PrepareFlags flags) {
  auto tok = data::LoadTokenizerFile(flags.tokenizer, flags.encoding);
  if (!tok.ok()) return Fail(tok.status());
  data::PrepareTokenizer pt;
  pt.tokenizer = tok->tokenizer.get();
  pt.info = tok->info;
  pt.bos_id = tok->bos_id;
  const bool tty = isatty(STDERR_FILENO) != 0;
  int last_tenth = -1;
  auto progress = [&](const data::PrepareProgress& p) {
    if (flags.quiet) return;
    const double frac = p.bytes_total > 0 ? std::min(1.0, double(p.bytes_done) / p.bytes_total) : 1;
    const double rate = p.seconds > 0 ? p.tokens / p.seconds : 0;
    const double eta = frac > 0 && frac < 1 ? p.seconds * (1 - frac) / frac : 0;
    const std::string line =
        absl::StrFormat("%5.1f%%  %s of %s bytes  %s tokens  %s documents  %s tokens/s  eta %.0f s",
                        100 * frac, Count(p.bytes_done), Count(p.bytes_total), Count(p.tokens),
                        Count(p.documents), Count(int64_t(rate)), eta);
    if (tty) {
      const int width = 24;
      const int filled = int(frac * width);
      std::cerr << "\r[" << std::string(filled, '#') << std::string(width - filled, ' ') << "] "
                << line << "\033[K" << std::flush;
    } else if (int(frac * 10) > last_tenth) {
      last_tenth = int(frac * 10);
      std::cerr << "longhaul: " << line << "\n";
    }
  };
  auto result = data::PrepareData(flags.options, pt, progress);
  if (tty && !flags.quiet) std::cerr << "\n";
  if (!result.ok()) return Fail(result.status());
  const model::TokenManifest& m = result->manifest;
  std::cout << absl::StrFormat(
      "%s%s/%s: %s train tokens in %d shards, %s val tokens in %d shards (%s, %d-bit ids)\n",
      result->resumed ? "resumed; " : "", flags.options.out_dir, model::kManifestFileName,
      Count(m.Tokens(false)), m.train.size(), Count(m.Tokens(true)), m.val.size(), m.tokenizer.name,
      m.token_bits);
  int64_t docs = 0, replaced = 0;
  for (const model::ManifestSource& s : m.sources) {
    docs += s.documents;
    replaced += s.replaced_utf8;
  }
  std::cout << absl::StrFormat(
      "%d documents from %d files; %.1f s, %s tokens/s per core\n", docs, m.sources.size(),
      result->seconds,
      Count(int64_t(result->encode_cpu_seconds > 0
                        ? (m.Tokens(false) + m.Tokens(true)) / result->encode_cpu_seconds
                        : 0)));
  if (replaced > 0) {
    std::cout << absl::StrFormat("%d documents held invalid UTF-8 (replaced by U+FFFD)\n",
                                 replaced);
  }
  if (m.bad_documents > 0) {
    std::cout << absl::StrFormat("%d bad documents skipped:", m.bad_documents);
    for (const auto& [reason, n] : m.bad_by_reason)
      std::cout << absl::StrFormat(" %s: %d;", reason, n);
    std::cout << "\n";
    for (size_t i = 0; i < m.bad_examples.size() && i < 10; ++i) {
      const auto& e = m.bad_examples[i];
      std::cout << absl::StrFormat("  %s:%d: %s\n", e.file, e.line, e.reason);
    }
    if (m.bad_examples.size() > 10) std::cout << "  ... (the manifest lists more)\n";
  }
  return kExitOk;
}

struct InspectFlags {
  std::string manifest, tokenizer, encoding;
  int sample_tokens = 48;
  bool verify = false;
};

int Inspect(const InspectFlags& flags, const ClientOptions& options) {
  auto m = model::LoadTokenManifest(flags.manifest);
  if (!m.ok()) return Fail(m.status());
  std::unique_ptr<data::Tokenizer> tok;
  if (!flags.tokenizer.empty()) {
    auto loaded = data::LoadTokenizerFile(flags.tokenizer, flags.encoding);
    if (!loaded.ok()) return Fail(loaded.status());
    if (loaded->info.sha256 != m->tokenizer.sha256) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "tokenizer '", flags.tokenizer, "' (sha256 ", loaded->info.sha256.substr(0, 16),
          "...) is not the one the manifest was made with (", m->tokenizer.name, ", sha256 ",
          m->tokenizer.sha256.substr(0, 16), "...)")));
    }
    tok = std::move(loaded->tokenizer);
  }
  nlohmann::ordered_json out;
  out["manifest"] = flags.manifest;
  out["tokenizer"] = {{"name", m->tokenizer.name},
                      {"kind", m->tokenizer.kind},
                      {"vocab_size", m->tokenizer.vocab_size},
                      {"sha256", m->tokenizer.sha256}};
  out["token_bits"] = m->token_bits;
  std::vector<std::string> problems;
  for (bool val : {false, true}) {
    nlohmann::ordered_json shards = nlohmann::ordered_json::array();
    const auto& list = m->split(val);
    for (size_t i = 0; i < list.size(); ++i) {
      nlohmann::ordered_json s = {
          {"file", list[i].file}, {"tokens", list[i].tokens}, {"documents", list[i].documents}};
      if (flags.verify) {
        auto read = model::ReadManifestShard(*m, val, i, /*verify_hash=*/true);
        s["ok"] = read.ok();
        if (!read.ok()) problems.push_back(std::string(read.status().message()));
      }
      shards.push_back(s);
    }
    out[val ? "val" : "train"] = {{"tokens", m->Tokens(val)}, {"shards", shards}};
  }
  std::string sample;
  std::vector<uint32_t> sample_ids;
  if (!m->train.empty() && flags.sample_tokens > 0) {
    auto ids = model::ReadManifestShard(*m, false, 0, /*verify_hash=*/false);
    if (!ids.ok()) {
      problems.push_back(std::string(ids.status().message()));
    } else {
      sample_ids.assign(ids->begin(),
                        ids->begin() + std::min<size_t>(ids->size(), flags.sample_tokens));
      if (tok) {
        auto text = tok->Decode(sample_ids);
        if (text.ok()) sample = *text;
      }
    }
  }
  out["sample_ids"] = sample_ids;
  if (tok) out["sample_text"] = sample;
  out["bad_documents"] = m->bad_documents;
  out["bad_by_reason"] = m->bad_by_reason;
  out["problems"] = problems;
  if (options.output == "json") {
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << absl::StrFormat("tokenizer  %s (%s, vocabulary %d, sha256 %s...)\n",
                                 m->tokenizer.name, m->tokenizer.kind, m->tokenizer.vocab_size,
                                 m->tokenizer.sha256.substr(0, 16));
    for (bool val : {false, true}) {
      const auto& list = m->split(val);
      int64_t docs = 0;
      for (const auto& s : list) docs += s.documents;
      std::cout << absl::StrFormat("%-5s      %s tokens, %d documents, %d shards (%d-bit ids)\n",
                                   val ? "val" : "train", Count(m->Tokens(val)), docs, list.size(),
                                   m->token_bits);
      for (size_t i = 0; i < list.size() && i < 8; ++i) {
        std::cout << absl::StrFormat(
            "             %s  %s tokens%s\n", list[i].file, Count(list[i].tokens),
            flags.verify
                ? (out[val ? "val" : "train"]["shards"][i]["ok"].get<bool>() ? "  ok" : "  BAD")
                : "");
      }
      if (list.size() > 8)
        std::cout << absl::StrFormat("             ... %d more\n", list.size() - 8);
    }
    std::cout << absl::StrFormat("sources    %d files, %d bad documents\n", m->sources.size(),
                                 m->bad_documents);
    if (!sample_ids.empty()) {
      if (tok) {
        std::cout << "sample     "
                  << nlohmann::json(sample).dump(-1, ' ', false,
                                                 nlohmann::json::error_handler_t::replace)
                  << "\n";
      } else {
        std::cout << "sample     ids";
        for (uint32_t id : sample_ids) std::cout << " " << id;
        std::cout << "\n           (pass --tokenizer to decode them)\n";
      }
    }
    for (const std::string& p : problems) std::cout << "problem    " << p << "\n";
  }
  return problems.empty() ? kExitOk : kExitError;
}

}  // namespace

void AddDataCommands(CLI::App& app, const ClientOptions& options, int* exit_code) {
  CLI::App* data = app.add_subcommand("data", "Prepare and inspect training data (token shards)");
  data->require_subcommand(1);

  auto prepare_flags = std::make_shared<PrepareFlags>();
  prepare_flags->options.threads =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  CLI::App* prepare = data->add_subcommand(
      "prepare",
      "Tokenize text files and JSON lines into token shards and a manifest a job can read "
      "(data: {train: DIR/manifest.json}). Resumable: run the same command again after an "
      "interruption.");
  prepare
      ->add_option("inputs", prepare_flags->options.inputs,
                   "Files and directories: .jsonl/.ndjson/.json are JSON lines (one document "
                   "per line, in --field), anything else text (one document per file); "
                   "directories are walked for .txt .text .md .jsonl .ndjson")
      ->required();
  prepare->add_option("--out", prepare_flags->options.out_dir, "Output directory")->required();
  prepare
      ->add_option("--tokenizer", prepare_flags->tokenizer,
                   "The model's tokenizer: tokenizer.json (or a folder with one), or a tiktoken "
                   "rank file (cl100k_base.tiktoken, ...)")
      ->required();
  prepare->add_option("--encoding", prepare_flags->encoding,
                      "tiktoken encoding of a rank file whose name does not say it (gpt2, "
                      "r50k_base, cl100k_base)");
  prepare
      ->add_option("--field", prepare_flags->options.json_field, "JSON lines: the document's field")
      ->capture_default_str();
  prepare
      ->add_option("--val-fraction", prepare_flags->options.val_fraction,
                   "Share of pieces (documents; ~1 MiB parts of text files) in the val split")
      ->capture_default_str();
  prepare->add_option("--seed", prepare_flags->options.seed, "Seed of the val split")
      ->capture_default_str();
  prepare
      ->add_option("--shard-tokens", prepare_flags->options.shard_tokens,
                   "Tokens per shard (about)")
      ->capture_default_str();
  prepare->add_option("--threads,-j", prepare_flags->options.threads, "Encoding threads")
      ->capture_default_str();
  prepare->add_option("--token-bits", prepare_flags->options.token_bits,
                      "Id width of the shards: 16 or 32 (default: 16 where the vocabulary fits)");
  prepare->add_option(
      "--max-bad", prepare_flags->options.max_bad_documents,
      "Fail when more documents than this are bad (default: report them, never fail)");
  prepare->add_flag("--force", prepare_flags->options.force,
                    "Start over: remove the directory's manifest, shards and interrupted run");
  prepare->add_flag("--quiet,-q", prepare_flags->quiet, "No progress output");
  prepare->callback([prepare_flags, exit_code] { *exit_code = Prepare(*prepare_flags); });

  auto inspect_flags = std::make_shared<InspectFlags>();
  CLI::App* inspect = data->add_subcommand(
      "inspect", "Show a manifest's tokenizer, shards and counts, and a sample of its tokens");
  inspect->add_option("manifest", inspect_flags->manifest, "manifest.json or its directory")
      ->required();
  inspect->add_option("--tokenizer", inspect_flags->tokenizer,
                      "Decode the sample with this tokenizer (must be the manifest's)");
  inspect->add_option("--encoding", inspect_flags->encoding, "tiktoken encoding of a rank file");
  inspect->add_option("--sample-tokens", inspect_flags->sample_tokens, "Tokens in the sample")
      ->capture_default_str();
  inspect->add_flag("--verify", inspect_flags->verify,
                    "Read every shard and check its size, ids and SHA-256 against the manifest");
  inspect->callback(
      [inspect_flags, &options, exit_code] { *exit_code = Inspect(*inspect_flags, options); });
}

}  // namespace longhaul::cli
