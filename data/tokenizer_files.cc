// Loading a tokenizer by file (see tokenizer_files.h).
#include "data/tokenizer_files.h"

#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "data/hf_tokenizer.h"
#include "data/tiktoken_tokenizer.h"

namespace longhaul::data {

StatusOr<LoadedTokenizer> LoadTokenizerFile(const std::string& path, const std::string& encoding) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) file = absl::StrCat(path, "/tokenizer.json");
  if (!fs::exists(file, ec)) {
    return absl::NotFoundError(absl::StrCat("tokenizer file '", file, "' does not exist"));
  }
  LoadedTokenizer out;
  ASSIGN_OR_RETURN(out.info.sha256, Sha256OfFile(file, "tokenizer file"));
  const std::string stem = fs::path(file).stem().string();
  if (absl::EndsWithIgnoreCase(file, ".json")) {
    ASSIGN_OR_RETURN(std::unique_ptr<HfTokenizer> hf, HfTokenizer::Load(file));
    out.bos_id = hf->bos_id();
    out.info.kind = "huggingface";
    // The model's folder names it better than "tokenizer.json".
    const fs::path parent = fs::path(file).parent_path().filename();
    out.info.name = parent.empty()
                        ? fs::path(file).filename().string()
                        : absl::StrCat(parent.string(), "/", fs::path(file).filename().string());
    out.info.vocab_size = hf->vocab_size();
    out.info.eot_id = hf->eot_id();
    out.info.bos_id = hf->bos_id();
    out.tokenizer = std::move(hf);
    return out;
  }
  const std::string name = encoding.empty() ? stem : encoding;
  auto enc = TiktokenEncodingByName(name);
  if (!enc.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer '", file,
                     "': a tiktoken rank file needs its encoding (--encoding gpt2, r50k_base "
                     "or cl100k_base), and its name '",
                     stem, "' is none of them"));
  }
  ASSIGN_OR_RETURN(out.tokenizer, MakeTiktokenTokenizer(name, file));
  out.info.kind = "tiktoken";
  out.info.name = name;
  out.info.vocab_size = out.tokenizer->vocab_size();
  out.info.eot_id = out.tokenizer->eot_id();
  out.info.bos_id = std::nullopt;
  return out;
}

}  // namespace longhaul::data
