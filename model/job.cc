// Job file parsing and validation (see job.h).
#include "model/job.h"

#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/yaml_walker.h"
#include "model/checkpoint.h"
#include "model/file_io.h"
#include "model/init_from.h"
#include "model/targets_frame.h"
#include "model/token_manifest.h"

namespace longhaul::model {
namespace {

using Entry = YamlWalker::Entry;
using Fields = YamlWalker::Fields;

// train-local's keys (a parse accepts its caller's more_keys after them).
const std::vector<absl::string_view> kTopKeys = {
    "name",    "model",     "init_from", "data",       "steps",   "batch_size", "microbatch_size",
    "seq_len", "optimizer", "seed",      "checkpoint", "backend", "threads"};
// The first five are required; then the subspace-cut variant's (gpt2), then llama's.
const std::vector<absl::string_view> kModelKeys = {"layers",
                                                   "channels",
                                                   "heads",
                                                   "vocab",
                                                   "context",
                                                   "residual_subspace",
                                                   "unconstrained_layers",
                                                   "family",
                                                   "kv_heads",
                                                   "head_dim",
                                                   "intermediate",
                                                   "norm_eps",
                                                   "rope_theta",
                                                   "rope_scaling",
                                                   "tied"};
const std::vector<absl::string_view> kLlamaOnlyKeys = {
    "kv_heads", "head_dim", "intermediate", "norm_eps", "rope_theta", "rope_scaling", "tied"};
const std::vector<absl::string_view> kRopeScalingKeys = {"factor", "low_freq_factor",
                                                         "high_freq_factor", "original_context"};
const std::vector<absl::string_view> kDataKeys = {"train", "format", "val", "val_every",
                                                  "val_batches"};
const std::vector<absl::string_view> kOptimizerKeys = {
    "lr",    "warmup_steps", "schedule", "min_lr_fraction", "weight_decay",
    "beta1", "beta2",        "eps",      "grad_clip"};
const std::vector<absl::string_view> kCheckpointKeys = {"every", "dir"};
constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();

class JobParser {
 public:
  JobParser(const std::string& source, std::string base_dir)
      : w_(source), base_dir_(std::move(base_dir)) {}

  StatusOr<Job> Parse(const std::string& text, absl::Span<const absl::string_view> more_keys) {
    Job job;
    job.source = w_.source();
    ASSIGN_OR_RETURN(const Entry root, w_.Root(text));
    std::vector<absl::string_view> known = kTopKeys;
    known.insert(known.end(), more_keys.begin(), more_keys.end());
    ASSIGN_OR_RETURN(const Fields top, w_.Map(root, known));
    auto get = [&top](absl::string_view key) -> const Entry* {
      auto it = top.find(key);
      return it == top.end() ? nullptr : &it->second;
    };
    if (get("name") == nullptr) return w_.Missing(root, "name");
    ASSIGN_OR_RETURN(job.name, w_.String(*get("name")));
    for (char c : job.name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') {
        return w_.Error(*get("name"), "may hold only letters, digits, '-', '_' and '.'");
      }
    }
    RETURN_IF_ERROR(ParseModel(root, get("model"), get("init_from"), &job));
    if (const Entry* e = get("data")) RETURN_IF_ERROR(ParseData(*e, &job.data));
    if (get("steps") == nullptr) return w_.Missing(root, "steps");
    ASSIGN_OR_RETURN(job.steps, w_.Int(*get("steps"), 1, kIntMax));
    if (get("batch_size") == nullptr) return w_.Missing(root, "batch_size");
    ASSIGN_OR_RETURN(job.batch_size, w_.Int(*get("batch_size"), 1, kIntMax));
    job.microbatch_size = job.batch_size;
    if (const Entry* e = get("microbatch_size")) {
      ASSIGN_OR_RETURN(job.microbatch_size, w_.Int(*e, 1, job.batch_size));
      if (job.batch_size % job.microbatch_size != 0) {
        return w_.Error(
            *e, absl::StrCat("batch_size ", job.batch_size,
                             " must be a multiple of microbatch_size ", job.microbatch_size));
      }
    }
    job.seq_len = job.model.max_seq_len;
    if (const Entry* e = get("seq_len")) {
      ASSIGN_OR_RETURN(job.seq_len, w_.Int(*e, 1, job.model.max_seq_len));
    }
    if (const Entry* e = get("optimizer")) RETURN_IF_ERROR(ParseOptimizer(*e, &job.optimizer));
    if (const Entry* e = get("seed")) {
      ASSIGN_OR_RETURN(job.seed, w_.Uint64(*e));
    }
    job.checkpoint.dir = absl::StrCat("checkpoints/", job.name);
    if (const Entry* e = get("checkpoint")) RETURN_IF_ERROR(ParseCheckpoint(*e, &job.checkpoint));
    if (const Entry* e = get("backend")) {
      ASSIGN_OR_RETURN(job.backend, w_.String(*e));
      if (job.backend != "cpu" && job.backend != "cpu-ref" && job.backend != "cuda" &&
          job.backend != "cuda-bf16") {
        return w_.Error(*e, absl::StrCat("unknown backend '", job.backend,
                                         "' (expected cpu, cpu-ref, cuda or cuda-bf16)"));
      }
    }
    if (const Entry* e = get("threads")) {
      ASSIGN_OR_RETURN(job.threads, w_.Int(*e, 0, 4096));
    }
    return job;
  }

 private:
  // A path from the job file: relative ones are relative to the job file's folder. A job a
  // daemon parses has no folder (base_dir_ empty): `longhaul submit` sends them absolute.
  StatusOr<std::string> Resolve(const Entry& e, const std::string& path) const {
    std::filesystem::path p(path);
    if (p.is_relative()) {
      if (base_dir_.empty()) {
        return w_.Error(e, "relative path '" + path +
                               "': a submitted job names files by absolute path (longhaul "
                               "submit resolves relative ones against the job file's folder)");
      }
      p = std::filesystem::path(base_dir_) / p;
    }
    return p.lexically_normal().string();
  }

  Status ParseModel(const Entry& root, const Entry* model, const Entry* init_from, Job* job) {
    if (model == nullptr && init_from == nullptr) {
      return w_.Error(root.value.Mark(), "model", "missing required key (give model or init_from)");
    }
    if (init_from != nullptr) {
      ASSIGN_OR_RETURN(std::string path, w_.String(*init_from));
      ASSIGN_OR_RETURN(job->init_from, Resolve(*init_from, path));
      auto config = ReadInitConfig(job->init_from);
      if (!config.ok()) return w_.Error(*init_from, config.status().message());
      if (config->vocab_size > kMaxFrameVocab) {
        return w_.Error(*init_from, absl::StrCat("the checkpoint's vocabulary of ",
                                                 config->vocab_size, " is above ", kMaxFrameVocab,
                                                 ", the largest a pipeline carries exactly"));
      }
      job->model = *config;
    }
    if (model == nullptr) return absl::OkStatus();
    ASSIGN_OR_RETURN(const Fields f, w_.Map(*model, kModelKeys));
    int values[5];
    for (int i = 0; i < 5; ++i) {
      auto it = f.find(kModelKeys[i]);
      if (it == f.end()) return w_.Missing(*model, kModelKeys[i]);
      // The vocabulary up to what a targets frame carries exactly (token ids are 32-bit).
      ASSIGN_OR_RETURN(values[i], w_.Int(it->second, 1, i == 3 ? kMaxFrameVocab : 1 << 20));
    }
    ModelConfig config = MakeConfig(values[0], values[1], values[2], values[3], values[4]);
    if (auto it = f.find("family"); it != f.end()) {
      ASSIGN_OR_RETURN(const std::string name, w_.String(it->second));
      auto family = ParseFamily(name);
      if (!family.ok()) return w_.Error(it->second, family.status().message());
      config.family = *family;
    }
    if (config.family == Family::kLlama) {
      RETURN_IF_ERROR(ParseLlama(*model, f, &config));
    } else {
      for (absl::string_view key : kLlamaOnlyKeys) {
        if (auto it = f.find(key); it != f.end()) {
          return w_.Error(it->second, "is a llama key (set family: llama)");
        }
      }
    }
    if (auto it = f.find("residual_subspace"); it != f.end()) {
      ASSIGN_OR_RETURN(config.residual_subspace, w_.Int(it->second, 0, config.channels));
    }
    if (auto it = f.find("unconstrained_layers"); it != f.end()) {
      if (config.residual_subspace == 0) {
        return w_.Error(it->second, "needs residual_subspace (the subspace-cut variant)");
      }
      ASSIGN_OR_RETURN(config.unconstrained_layers, w_.Int(it->second, 0, config.num_layers - 1));
    }
    if (config.family == Family::kGpt2 && config.channels % config.num_heads != 0) {
      return w_.Error(f.at("heads"),
                      absl::StrCat("channels (", config.channels, ") must be a multiple of heads (",
                                   config.num_heads, ")"));
    }
    Status valid = ValidateConfig(config);
    if (!valid.ok()) return w_.Error(*model, valid.message());
    if (init_from != nullptr) {
      const Status fits = CheckConfigMatches(config, job->model, job->init_from);
      if (!fits.ok()) return w_.Error(*model, fits.message());
    }
    job->model = config;
    return absl::OkStatus();
  }

  // The llama keys of `model` (job.h), defaults as Hugging Face's LlamaConfig has them.
  Status ParseLlama(const Entry& model, const Fields& f, ModelConfig* c) {
    auto get = [&f](absl::string_view key) -> const Entry* {
      auto it = f.find(key);
      return it == f.end() ? nullptr : &it->second;
    };
    c->num_kv_heads = c->num_heads;
    if (const Entry* e = get("kv_heads")) {
      ASSIGN_OR_RETURN(c->num_kv_heads, w_.Int(*e, 1, c->num_heads));
      if (c->num_heads % c->num_kv_heads != 0) {
        return w_.Error(*e, absl::StrCat("must divide heads (", c->num_heads, ")"));
      }
    }
    if (const Entry* e = get("head_dim")) {
      ASSIGN_OR_RETURN(c->head_dim, w_.Int(*e, 2, 4096));
    } else if (c->channels % c->num_heads != 0) {
      return w_.Error(*get("heads"),
                      absl::StrCat("channels (", c->channels, ") must be a multiple of heads (",
                                   c->num_heads, ") unless head_dim is given"));
    } else {
      c->head_dim = c->channels / c->num_heads;
    }
    const Entry* inter = get("intermediate");
    if (inter == nullptr) return w_.Missing(model, "intermediate");
    ASSIGN_OR_RETURN(c->intermediate_size, w_.Int(*inter, 1, 1 << 20));
    if (const Entry* e = get("norm_eps")) {
      ASSIGN_OR_RETURN(const double v, w_.Double(*e, 1e-12, 0.1));
      c->norm_eps = float(v);
    }
    if (const Entry* e = get("rope_theta")) {
      ASSIGN_OR_RETURN(c->rope_theta, w_.Double(*e, 1.0 + 1e-9, 1e12));
    }
    if (const Entry* e = get("tied")) {
      ASSIGN_OR_RETURN(const std::string v, w_.String(*e));
      if (v != "true" && v != "false") return w_.Error(*e, "must be true or false");
      c->tied_embeddings = v == "true";
    }
    if (const Entry* e = get("rope_scaling")) {
      ASSIGN_OR_RETURN(const Fields r, w_.Map(*e, kRopeScalingKeys));
      auto it = r.find("factor");
      if (it == r.end()) return w_.Missing(*e, "factor");
      ASSIGN_OR_RETURN(c->rope_scaling.factor, w_.Double(it->second, 1.0, 1e6));
      if (auto i = r.find("low_freq_factor"); i != r.end()) {
        ASSIGN_OR_RETURN(c->rope_scaling.low_freq_factor, w_.Double(i->second, 1e-9, 1e6));
      }
      if (auto i = r.find("high_freq_factor"); i != r.end()) {
        ASSIGN_OR_RETURN(c->rope_scaling.high_freq_factor, w_.Double(i->second, 1e-9, 1e6));
      }
      if (auto i = r.find("original_context"); i != r.end()) {
        ASSIGN_OR_RETURN(c->rope_scaling.original_context, w_.Int(i->second, 1, kIntMax));
      }
    }
    return absl::OkStatus();
  }

  StatusOr<std::string> DataPath(const Entry& e, bool manifest_only = false) {
    ASSIGN_OR_RETURN(std::string path, w_.String(e));
    if (path == kBuiltinData && !manifest_only) return path;
    ASSIGN_OR_RETURN(path, Resolve(e, path));
    const bool manifest = IsManifestPath(path);
    if (manifest_only && !manifest) {
      return w_.Error(e, absl::StrCat("'", path, "' is not a token manifest (a ", kManifestFileName,
                                      " or the folder holding one)"));
    }
    auto size =
        FileSize(manifest ? ManifestFile(path) : path, manifest ? "token manifest" : "data file");
    if (!size.ok()) return w_.Error(e, size.status().message());
    return path;
  }

  Status ParseMixture(const Entry& e, JobData* data) {
    if (e.value.size() == 0) return w_.Error(e, "an empty list: name one manifest or more");
    for (size_t i = 0; i < e.value.size(); ++i) {
      const Entry item{e.key, e.value[i], absl::StrCat(e.path, "[", i, "]")};
      ASSIGN_OR_RETURN(const Fields f, w_.Map(item, {"manifest", "weight"}));
      DataSource source;
      auto m = f.find("manifest");
      if (m == f.end()) return w_.Missing(item, "manifest");
      ASSIGN_OR_RETURN(source.manifest, DataPath(m->second, /*manifest_only=*/true));
      if (auto w = f.find("weight"); w != f.end()) {
        ASSIGN_OR_RETURN(source.weight, w_.Double(w->second, 1e-9, 1e9));
      }
      data->mixture.push_back(std::move(source));
    }
    data->train.clear();
    return absl::OkStatus();
  }

  Status ParseData(const Entry& e, JobData* data) {
    ASSIGN_OR_RETURN(const Fields f, w_.Map(e, kDataKeys));
    if (auto it = f.find("train"); it != f.end()) {
      if (it->second.value.IsSequence()) {
        RETURN_IF_ERROR(ParseMixture(it->second, data));
      } else {
        ASSIGN_OR_RETURN(data->train, DataPath(it->second));
      }
    }
    if (auto it = f.find("format"); it != f.end()) {
      ASSIGN_OR_RETURN(std::string name, w_.String(it->second));
      auto format = ParseDataFormat(name);
      if (!format.ok()) return w_.Error(it->second, format.status().message());
      data->format = *format;
    }
    if (auto it = f.find("val"); it != f.end()) {
      ASSIGN_OR_RETURN(data->val, DataPath(it->second));
    }
    if (auto it = f.find("val_every"); it != f.end()) {
      ASSIGN_OR_RETURN(data->val_every, w_.Int(it->second, 0, kIntMax));
    }
    if (auto it = f.find("val_batches"); it != f.end()) {
      ASSIGN_OR_RETURN(data->val_batches, w_.Int(it->second, 1, kIntMax));
    }
    return absl::OkStatus();
  }

  Status ParseOptimizer(const Entry& e, OptimizerOptions* o) {
    ASSIGN_OR_RETURN(const Fields f, w_.Map(e, kOptimizerKeys));
    auto number = [&](absl::string_view key, double min, double max, bool open_max,
                      float* out) -> Status {
      auto it = f.find(key);
      if (it == f.end()) return absl::OkStatus();
      ASSIGN_OR_RETURN(const double v, w_.Double(it->second, min, max));
      if (open_max && v >= max) {
        return w_.Error(it->second, absl::StrCat("must be below ", max));
      }
      *out = float(v);
      return absl::OkStatus();
    };
    constexpr double kBig = 1e30;
    RETURN_IF_ERROR(number("lr", 0, kBig, false, &o->lr));
    RETURN_IF_ERROR(number("min_lr_fraction", 0, 1, false, &o->min_lr_fraction));
    RETURN_IF_ERROR(number("weight_decay", 0, kBig, false, &o->weight_decay));
    RETURN_IF_ERROR(number("beta1", 0, 1, true, &o->beta1));
    RETURN_IF_ERROR(number("beta2", 0, 1, true, &o->beta2));
    RETURN_IF_ERROR(number("eps", 0, kBig, false, &o->eps));
    RETURN_IF_ERROR(number("grad_clip", 0, kBig, false, &o->grad_clip));
    if (auto it = f.find("lr"); it != f.end() && o->lr <= 0) {
      return w_.Error(it->second, "must be positive");
    }
    if (auto it = f.find("eps"); it != f.end() && o->eps <= 0) {
      return w_.Error(it->second, "must be positive");
    }
    if (auto it = f.find("warmup_steps"); it != f.end()) {
      ASSIGN_OR_RETURN(o->warmup_steps, w_.Int(it->second, 0, kIntMax));
    }
    if (auto it = f.find("schedule"); it != f.end()) {
      ASSIGN_OR_RETURN(std::string s, w_.String(it->second));
      if (s == "cosine") {
        o->schedule = LrSchedule::kCosine;
      } else if (s == "constant") {
        o->schedule = LrSchedule::kConstant;
      } else {
        return w_.Error(it->second,
                        absl::StrCat("unknown schedule '", s, "' (expected cosine or constant)"));
      }
    }
    Status valid = ValidateOptimizerOptions(*o);
    return valid.ok() ? valid : w_.Error(e, valid.message());
  }

  Status ParseCheckpoint(const Entry& e, JobCheckpoint* c) {
    ASSIGN_OR_RETURN(const Fields f, w_.Map(e, kCheckpointKeys));
    if (auto it = f.find("every"); it != f.end()) {
      ASSIGN_OR_RETURN(c->every, w_.Int(it->second, 0, kIntMax));
    }
    if (auto it = f.find("dir"); it != f.end()) {
      ASSIGN_OR_RETURN(std::string dir, w_.String(it->second));
      ASSIGN_OR_RETURN(c->dir, Resolve(it->second, dir));
    }
    return absl::OkStatus();
  }

  YamlWalker w_;
  std::string base_dir_;
};

}  // namespace

StatusOr<Job> ParseJob(const std::string& text, const std::string& source,
                       const std::string& base_dir, absl::Span<const absl::string_view> more_keys) {
  return JobParser(source, base_dir).Parse(text, more_keys);
}

StatusOr<Job> LoadJob(const std::string& path, absl::Span<const absl::string_view> more_keys) {
  ASSIGN_OR_RETURN(const int64_t size, FileSize(path, "job file"));
  std::string text(size_t(size), '\0');
  RETURN_IF_ERROR(ReadFileRange(path, "job file", 0, text.data(), text.size()));
  std::string base = std::filesystem::path(path).parent_path().string();
  if (base.empty()) base = ".";
  return ParseJob(text, path, base, more_keys);
}

}  // namespace longhaul::model
