// A job's training and validation windows (see job_windows.h).
#include "model/job_windows.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "model/corpus.h"
#include "model/data_loader.h"
#include "model/manifest_windows.h"

namespace longhaul::model {

StatusOr<std::shared_ptr<const TokenData>> LoadData(const std::string& spec, DataFormat format,
                                                    uint64_t builtin_seed, int vocab,
                                                    const std::string& context) {
  TokenData data;
  if (spec == kBuiltinData) {
    const size_t bytes = builtin_seed == 1 ? kBuiltinCorpusBytes : kBuiltinCorpusBytes / 8;
    data = TokensFromText(BuiltinCorpus(builtin_seed, bytes), kBuiltinData);
  } else {
    auto read = ReadTokenData(spec, format);
    if (!read.ok()) return Annotate(read.status(), context);
    data = std::move(*read);
  }
  RETURN_IF_ERROR(Annotate(CheckTokensFit(data, vocab), context));
  return std::make_shared<const TokenData>(std::move(data));
}

StatusOr<TokenManifest> LoadJobManifest(const std::string& path, const ModelConfig& model,
                                        const std::string& context) {
  auto m = LoadTokenManifest(path);
  if (!m.ok()) return Annotate(m.status(), context);
  if (int64_t(m->tokenizer.vocab_size) != model.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": token manifest '", path, "' was made with tokenizer '", m->tokenizer.name,
        "' (vocabulary ", m->tokenizer.vocab_size, "), but the model's vocabulary is ",
        model.vocab_size, ": prepare the data with the model's own tokenizer"));
  }
  return m;
}

namespace {

StatusOr<std::unique_ptr<WindowSource>> ManifestWindowSource(const std::string& path,
                                                             const Job& job,
                                                             const std::string& context, bool val,
                                                             int seq_len, uint64_t seed) {
  ASSIGN_OR_RETURN(TokenManifest m, LoadJobManifest(path, job.model, context));
  if (val && m.val.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        context, ": token manifest '", path,
        "' has no val split (prepare it with --val-fraction above 0, or name another data.val)"));
  }
  auto w = ManifestWindows::Create(std::move(m), val, seq_len, /*shuffle=*/!val, seed);
  if (!w.ok()) return Annotate(w.status(), context);
  return std::unique_ptr<WindowSource>(std::move(w).value());
}

}  // namespace

StatusOr<std::unique_ptr<WindowSource>> JobTrainWindows(const Job& job, int seq_len) {
  const std::string context = absl::StrCat(job.source, ": data.train");
  if (!job.data.mixture.empty()) {
    std::vector<MixturePart> parts;
    std::string tokenizer;
    for (size_t i = 0; i < job.data.mixture.size(); ++i) {
      const DataSource& s = job.data.mixture[i];
      const std::string where = absl::StrCat(context, "[", i, "]");
      ASSIGN_OR_RETURN(TokenManifest m, LoadJobManifest(s.manifest, job.model, where));
      if (i == 0) tokenizer = m.tokenizer.sha256;
      if (m.tokenizer.sha256 != tokenizer) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": token manifest '", s.manifest, "' was made with another tokenizer than ",
            context, "[0]'s (", m.tokenizer.name, ", sha256 ", m.tokenizer.sha256.substr(0, 16),
            "...): a mixture's sources must share one"));
      }
      // Each source shuffles with its own seed, so that two copies of one manifest differ.
      auto w = ManifestWindows::Create(std::move(m), false, seq_len, true, job.seed + i);
      if (!w.ok()) return Annotate(w.status(), where);
      parts.push_back({std::move(w).value(), s.weight});
    }
    auto mix = MixtureWindows::Create(std::move(parts));
    if (!mix.ok()) return Annotate(mix.status(), context);
    return std::unique_ptr<WindowSource>(std::move(mix).value());
  }
  if (job.data.train != kBuiltinData && IsManifestPath(job.data.train)) {
    return ManifestWindowSource(job.data.train, job, context, false, seq_len, job.seed);
  }
  ASSIGN_OR_RETURN(auto data,
                   LoadData(job.data.train, job.data.format, 1, job.model.vocab_size, context));
  return MemoryWindows(std::move(data), seq_len, /*shuffle=*/true, job.seed);
}

StatusOr<std::unique_ptr<WindowSource>> JobValWindows(const Job& job, int seq_len) {
  const std::string context = absl::StrCat(job.source, ": data.val");
  if (job.data.val != kBuiltinData && IsManifestPath(job.data.val)) {
    return ManifestWindowSource(job.data.val, job, context, true, seq_len, job.seed);
  }
  ASSIGN_OR_RETURN(auto data,
                   LoadData(job.data.val, job.data.format, 2, job.model.vocab_size, context));
  return MemoryWindows(std::move(data), seq_len, /*shuffle=*/false, job.seed);
}

}  // namespace longhaul::model
