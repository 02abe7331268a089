// Convergence study: what each codec on a pipeline cut costs in loss and saves in bytes.
//
// The model of a job file (default configs/job.example.yaml) is trained as two fragments in
// one process (tools/bench/cut_run.h) with the codec under study applied, through the real
// wire frames, to the activations and activation gradients crossing the cut, for the job's
// steps on its data (the built-in corpus), once per codec and seed (a study entry may also
// name one codec per direction, FORWARD/BACKWARD). The table reports, per codec: the final
// training loss (mean of the last --last steps) and the validation loss relative to fp32 (no
// compression, same seed), and the wire bytes sent per step across the cut and their ratio
// to fp32's. An entry CUT@TIED also compresses the tied-embedding exchange between the two
// fragments (model/tied_exchange.h): its bytes are the "tied" columns. This is what the
// controller's ladder order and the jobs' default quality floor are chosen from
// (docs/BENCHMARKS.md, "Convergence study"). Before the study it checks that the fp32 path
// reproduces FragmentChain::TrainStep bit for bit.
//
// An entry subK:CODEC (subKfF:CODEC: with F unconstrained last layers) trains the
// subspace-cut variant instead (model/subspace.h: K floats per
// position cross the cut, and the last stage gets the tokens with the targets), against the
// job's standard model in fp32: the table then says what the variant costs in loss at equal
// tokens and saves in cut bytes.
//
// Runs are independent and deterministic (each has its own backend with a fixed thread
// count), so --jobs only changes the wall time, never the figures.
//
//   bazel build //tools/bench:convergence_study
//   bazel-bin/tools/bench/convergence_study --job configs/job.example.yaml --seeds 3 --jobs 2
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compression/codec_spec.h"
#include "compression/controller.h"
#include "daemon/job/spec/job_spec.h"
#include "model/chain.h"
#include "model/job.h"
#include "model/trainer.h"
#include "tools/bench/cut_run.h"

namespace {

using namespace longhaul;  // NOLINT(google-build-using-namespace)
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string job = "configs/job.example.yaml";
  std::vector<std::string> codecs;  // empty: DefaultCodecs()
  int steps = 0;                    // 0: the job's
  int seeds = 3;
  int64_t first_seed = -1;  // -1: the job's
  int jobs = 2;
  int threads = 1;
  int last = 10;
  int progress = 50;
  int verify_steps = 5;
  double tolerance = 2.0;  // percent
  std::string markdown;
  std::string curves;
};

// The controller's default ladder, then q2 and a few more points around it.
std::vector<std::string> DefaultCodecs() {
  std::vector<std::string> codecs = compression::ControllerOptions().ladder;
  for (const char* extra : {"fp16", "q2", "q2:sr", "topk:0.3+q8", "topk:0.1", "topk:0.01+q8"}) {
    codecs.push_back(extra);
  }
  return codecs;
}

// "subK" or "subKfF": the subspace-cut variant with K coordinates and F unconstrained layers.
bool ParseVariant(const std::string& prefix, int* k, int* free) {
  if (prefix.rfind("sub", 0) != 0) return false;
  const size_t f = prefix.find('f');
  *free = 0;
  if (f != std::string::npos && !absl::SimpleAtoi(prefix.substr(f + 1), free)) return false;
  return absl::SimpleAtoi(prefix.substr(3, f == std::string::npos ? f : f - 3), k) && *k >= 1 &&
         *free >= 0;
}

// A study entry is one codec for both directions ("q4") or FORWARD/BACKWARD ("q4/q2:sr":
// q4 on the activations, q2:sr on their gradients), optionally followed by @TIED, a codec for
// the tied-embedding gradient parts with error feedback ("fp32@q2"; without it they travel
// exactly); returns it with canonical specs and a single codec when both directions use the
// same one. A prefix subK: trains the subspace-cut variant with K coordinates
// (model/subspace.h) instead of the job's model ("sub16:q8": its K = 16 coordinates in q8).
StatusOr<std::string> Canonical(const std::string& entry) {
  if (entry.rfind("sub", 0) == 0) {
    const size_t colon = entry.find(':');
    int k = 0, free = 0;
    if (colon == std::string::npos || !ParseVariant(entry.substr(0, colon), &k, &free)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", entry, "': expected subK:CODEC or subKfF:CODEC with K >= 1, e.g. sub16f1:q8"));
    }
    ASSIGN_OR_RETURN(const std::string cut, Canonical(entry.substr(colon + 1)));
    return absl::StrCat(entry.substr(0, colon), ":", cut);
  }
  const size_t at = entry.find('@');
  if (at != std::string::npos) {
    ASSIGN_OR_RETURN(const std::string cut, Canonical(entry.substr(0, at)));
    ASSIGN_OR_RETURN(const compression::CodecSpec tied,
                     compression::ParseCodecSpec(entry.substr(at + 1)));
    return absl::StrCat(cut, "@", tied.ToString());
  }
  const size_t slash = entry.find('/');
  ASSIGN_OR_RETURN(const compression::CodecSpec forward,
                   compression::ParseCodecSpec(entry.substr(0, slash)));
  if (slash == std::string::npos) return forward.ToString();
  ASSIGN_OR_RETURN(const compression::CodecSpec backward,
                   compression::ParseCodecSpec(entry.substr(slash + 1)));
  if (forward.ToString() == backward.ToString()) return forward.ToString();
  return absl::StrCat(forward.ToString(), "/", backward.ToString());
}

struct RunResult {
  std::string codec;
  uint64_t seed = 0;
  std::string error;  // empty when the run completed
  std::vector<float> losses;
  double train_loss = 0, val_loss = 0, val_loss_codec = 0;
  double codec_bytes = 0, all_bytes = 0, raw_bytes = 0;  // per step
  double tied_bytes = 0;                                 // per step, both ends
  double codec_ms = 0;                                   // encode + decode per step
  double seconds = 0;
};

class Printer {
 public:
  template <typename... Args>
  void Line(const absl::FormatSpec<Args...>& format, const Args&... args) {
    std::lock_guard<std::mutex> lock(mu_);
    std::printf("%s\n", absl::StrFormat(format, args...).c_str());
    std::fflush(stdout);
  }

 private:
  std::mutex mu_;
};

// The run fails with an error (shown in the table) rather than aborting the study: a lossy
// codec can make training diverge, and the study should say so.
void TrainOne(const model::Job& job, const std::shared_ptr<const model::TokenData>& train,
              const std::shared_ptr<const model::TokenData>& val, const Flags& f, Printer* out,
              RunResult* r) {
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  auto fail = [&](const Status& s) {
    r->error = std::string(s.message());
    out->Line("[%-18s seed %d] FAILED after %d steps: %s", r->codec, r->seed, r->losses.size(),
              r->error);
  };
  bench::CutRunOptions options;
  model::Job variant = job;
  std::string codec = r->codec;
  if (codec.rfind("sub", 0) == 0) {
    const size_t colon = codec.find(':');
    ParseVariant(codec.substr(0, colon), &variant.model.residual_subspace,
                 &variant.model.unconstrained_layers);
    codec = codec.substr(colon + 1);
  }
  const size_t at = codec.find('@');
  const std::string cut = codec.substr(0, at);
  if (at != std::string::npos) options.tied_codec = codec.substr(at + 1);
  const size_t slash = cut.find('/');
  options.forward_codec = cut.substr(0, slash);
  options.backward_codec = slash == std::string::npos ? cut : cut.substr(slash + 1);
  options.seed = r->seed;
  options.threads = f.threads;
  auto run = bench::CutRun::Create(variant, train, val, options);
  if (!run.ok()) return fail(run.status());
  for (int step = 0; step < job.steps; ++step) {
    auto loss = (*run)->TrainStep(step, job.steps);
    if (!loss.ok()) return fail(loss.status());
    if (!std::isfinite(*loss)) return fail(absl::InternalError("loss is not finite"));
    r->losses.push_back(*loss);
    if (f.progress > 0 && (step + 1) % f.progress == 0 && step + 1 < job.steps) {
      out->Line("[%-18s seed %d] step %4d/%d  loss %.4f  %6.1f s", r->codec, r->seed, step + 1,
                job.steps, *loss, elapsed());
    }
  }
  const int last = std::min<int>(f.last, int(r->losses.size()));
  double sum = 0;
  for (int i = int(r->losses.size()) - last; i < int(r->losses.size()); ++i) sum += r->losses[i];
  r->train_loss = sum / std::max(last, 1);
  auto v = (*run)->Validate(false);
  if (!v.ok()) return fail(v.status());
  r->val_loss = *v;
  v = (*run)->Validate(true);
  if (!v.ok()) return fail(v.status());
  r->val_loss_codec = *v;
  const bench::CutTraffic& t = (*run)->traffic();
  r->codec_bytes = double(t.codec_wire) / job.steps;
  r->raw_bytes = double(t.codec_raw) / job.steps;
  r->all_bytes = double(t.codec_wire + t.exact_wire) / job.steps;
  r->tied_bytes = double(t.tied_wire) / job.steps;
  r->codec_ms = 1e3 * t.codec_seconds / job.steps;
  r->seconds = elapsed();
  out->Line(
      "[%-18s seed %d] done in %.1f s: train %.4f (last %d)  val %.4f (via codec %.4f)  "
      "%.1f KiB/step on the cut (%.4f of raw)",
      r->codec, r->seed, r->seconds, r->train_loss, last, r->val_loss, r->val_loss_codec,
      r->codec_bytes / 1024, r->codec_bytes / r->raw_bytes);
}

// One codec's figures over the seeds; differences are per seed against fp32 of that seed.
struct Row {
  std::string codec;
  int ok = 0, failed = 0;
  std::string error;
  double train = 0, val = 0, val_codec = 0;        // means over seeds
  double d_train = 0, d_val = 0, d_val_codec = 0;  // means of the % differences
  double sd_train = 0, sd_val = 0;                 // their standard deviations
  double d_train_max = -1e30, d_val_max = -1e30;   // worst seed
  double codec_bytes = 0, all_bytes = 0, tied_bytes = 0, codec_ms = 0;  // means
};

std::string Percent(double p) { return absl::StrFormat("%+.2f%%", p); }

// Sample standard deviation.
double StdDev(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  double mean = 0, sq = 0;
  for (double x : v) mean += x / v.size();
  for (double x : v) sq += (x - mean) * (x - mean);
  return std::sqrt(sq / (v.size() - 1));
}

std::vector<Row> Summarize(const std::vector<std::string>& codecs,
                           const std::vector<RunResult>& results) {
  std::vector<Row> rows;
  for (const std::string& codec : codecs) {
    Row row;
    row.codec = codec;
    std::vector<double> dts, dvs;
    for (const RunResult& r : results) {
      if (r.codec != codec) continue;
      const RunResult* base = nullptr;
      for (const RunResult& b : results) {
        if (b.codec == "fp32" && b.seed == r.seed && b.error.empty()) base = &b;
      }
      if (!r.error.empty() || base == nullptr) {
        ++row.failed;
        row.error = r.error.empty() ? "fp32 failed" : r.error;
        continue;
      }
      ++row.ok;
      row.train += r.train_loss;
      row.val += r.val_loss;
      row.val_codec += r.val_loss_codec;
      dts.push_back(100 * (r.train_loss / base->train_loss - 1));
      dvs.push_back(100 * (r.val_loss / base->val_loss - 1));
      row.d_train += dts.back();
      row.d_val += dvs.back();
      row.d_val_codec += 100 * (r.val_loss_codec / base->val_loss - 1);
      row.d_train_max = std::max(row.d_train_max, dts.back());
      row.d_val_max = std::max(row.d_val_max, dvs.back());
      row.codec_bytes += r.codec_bytes;
      row.all_bytes += r.all_bytes;
      row.tied_bytes += r.tied_bytes;
      row.codec_ms += r.codec_ms;
    }
    if (row.ok > 0) {
      for (double* v :
           {&row.train, &row.val, &row.val_codec, &row.d_train, &row.d_val, &row.d_val_codec,
            &row.codec_bytes, &row.all_bytes, &row.tied_bytes, &row.codec_ms}) {
        *v /= row.ok;
      }
    }
    row.sd_train = StdDev(dts);
    row.sd_val = StdDev(dvs);
    rows.push_back(row);
  }
  return rows;
}

// The markdown table; with several seeds, differences carry their standard deviation and
// the worst seed.
std::vector<std::string> Table(const std::vector<Row>& rows, const Row& fp32, bool multi) {
  std::vector<std::string> table;
  const char* sd = multi ? " (± sd)" : "";
  table.push_back(
      absl::StrCat("| codec | train loss | vs fp32", sd, " | val loss | vs fp32", sd, " |",
                   multi ? " worst seed (train / val) |" : "",
                   " val, codec also in eval | cut KiB/step | vs fp32 | tied KiB/step | "
                   "vs fp32 | all KiB/step | vs fp32 | codec ms/step |"));
  table.push_back(absl::StrCat("| --- | --- | --- | --- | --- |", multi ? " --- |" : "",
                               " --- | --- | --- | --- | --- | --- | --- | --- |"));
  auto diff = [multi](double d, double sd) {
    return multi ? absl::StrFormat("%s ± %.2f", Percent(d), sd) : Percent(d);
  };
  for (const Row& r : rows) {
    if (r.ok == 0) {
      table.push_back(absl::StrCat("| ", r.codec, " | failed: ", r.error, " |"));
      continue;
    }
    const std::string name =
        r.failed > 0 ? absl::StrCat(r.codec, " (", r.failed, " seeds failed)") : r.codec;
    table.push_back(absl::StrFormat(
        "| %s | %.4f | %s | %.4f | %s |%s %.4f (%s) | %.1f | %.4f | %.1f | %.4f | %.1f | %.4f | "
        "%.2f |",
        name, r.train, diff(r.d_train, r.sd_train), r.val, diff(r.d_val, r.sd_val),
        multi ? absl::StrCat(" ", Percent(r.d_train_max), " / ", Percent(r.d_val_max), " |") : "",
        r.val_codec, Percent(r.d_val_codec), r.codec_bytes / 1024, r.codec_bytes / fp32.codec_bytes,
        r.tied_bytes / 1024, r.tied_bytes / fp32.tied_bytes, r.all_bytes / 1024,
        r.all_bytes / fp32.all_bytes, r.codec_ms));
  }
  return table;
}

int Run(Flags f) {
  auto loaded = model::LoadJob(f.job, daemon::PipelineJobKeys());
  if (!loaded.ok()) {
    std::fprintf(stderr, "convergence_study: %s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  model::Job job = *loaded;
  if (f.steps > 0) job.steps = f.steps;
  if (f.first_seed >= 0) job.seed = uint64_t(f.first_seed);
  if (f.codecs.empty()) f.codecs = DefaultCodecs();
  for (std::string& c : f.codecs) {
    auto canonical = Canonical(c);
    if (!canonical.ok()) {
      std::fprintf(stderr, "convergence_study: %s\n",
                   std::string(canonical.status().message()).c_str());
      return 1;
    }
    c = *canonical;
  }
  if (std::find(f.codecs.begin(), f.codecs.end(), "fp32") == f.codecs.end()) {
    f.codecs.insert(f.codecs.begin(), "fp32");
  }
  const model::ModelConfig& c = job.model;
  auto train = model::LoadData(job.data.train, job.data.format, 1, c.vocab_size, "data.train");
  if (!train.ok()) {
    std::fprintf(stderr, "convergence_study: %s\n", std::string(train.status().message()).c_str());
    return 1;
  }
  std::shared_ptr<const model::TokenData> val;
  if (!job.data.val.empty()) {
    auto v = model::LoadData(job.data.val, job.data.format, 2, c.vocab_size, "data.val");
    if (!v.ok()) {
      std::fprintf(stderr, "convergence_study: %s\n", std::string(v.status().message()).c_str());
      return 1;
    }
    val = *v;
  }
  if (val == nullptr) {
    std::fprintf(stderr, "convergence_study: %s has no data.val\n", f.job.c_str());
    return 1;
  }
  const std::vector<int> split = model::FragmentChain::EvenSplit(c.num_layers, 2);
  absl::PrintF(
      "convergence study: %s (%s): L=%d C=%d NH=%d V=%d T=%d, %.2fM parameters, cut after layer "
      "%d of %d\n"
      "  %d steps x %d sequences (%d microbatches of %d), lr %g (%d warmup, %s), seeds %d..%d\n"
      "  train %zu tokens, val %zu tokens (%d batches); %zu codecs, %d concurrent runs x %d "
      "kernel threads\n",
      f.job, job.name, c.num_layers, c.channels, c.num_heads, c.vocab_size, job.seq_len,
      model::NumParameters(c) / 1e6, split[1], c.num_layers, job.steps, job.batch_size,
      job.microbatches(), job.microbatch_size, job.optimizer.lr, job.optimizer.warmup_steps,
      job.optimizer.schedule == model::LrSchedule::kCosine ? "cosine" : "constant", job.seed,
      job.seed + f.seeds - 1, (*train)->tokens.size(), val->tokens.size(), job.data.val_batches,
      f.codecs.size(), f.jobs, f.threads);
  std::fflush(stdout);

  if (f.verify_steps > 0) {
    // The job's model, and each subspace-cut variant the study trains.
    std::vector<std::pair<int, int>> variants = {{c.residual_subspace, c.unconstrained_layers}};
    for (const std::string& codec : f.codecs) {
      std::pair<int, int> v;
      if (!ParseVariant(codec.substr(0, codec.find(':')), &v.first, &v.second)) continue;
      if (std::find(variants.begin(), variants.end(), v) == variants.end()) variants.push_back(v);
    }
    for (const auto& [k, free] : variants) {
      model::Job variant = job;
      variant.model.residual_subspace = k;
      variant.model.unconstrained_layers = free;
      const Status valid = model::ValidateConfig(variant.model);
      const Status s = valid.ok() ? bench::VerifyAgainstChain(variant, *train, job.seed, f.threads,
                                                              std::min(f.verify_steps, job.steps))
                                  : valid;
      if (!s.ok()) {
        std::fprintf(stderr, "convergence_study: check failed (%s): %s\n",
                     variant.model.DebugString().c_str(), std::string(s.message()).c_str());
        return 1;
      }
      std::printf(
          "check: fp32 over frames == FragmentChain::TrainStep for %d steps, bit for bit (%s)\n",
          std::min(f.verify_steps, job.steps), variant.model.DebugString().c_str());
    }
  }

  std::vector<RunResult> results;
  for (int s = 0; s < f.seeds; ++s) {
    for (const std::string& codec : f.codecs) {
      RunResult r;
      r.codec = codec;
      r.seed = job.seed + s;
      results.push_back(r);
    }
  }
  Printer printer;
  std::atomic<size_t> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < std::max(1, f.jobs); ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < results.size(); i = next++) {
        TrainOne(job, *train, val, f, &printer, &results[i]);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  const std::vector<Row> rows = Summarize(f.codecs, results);
  const Row* fp32 = nullptr;
  for (const Row& r : rows) {
    if (r.codec == "fp32" && r.ok > 0) fp32 = &r;
  }
  if (fp32 == nullptr) {
    std::fprintf(stderr, "convergence_study: the fp32 baseline failed\n");
    return 1;
  }
  const std::vector<std::string> table = Table(rows, *fp32, f.seeds > 1);
  // The suggested floor: the fewest bytes among codecs whose training and validation loss
  // stay within the tolerance of fp32, on average over the seeds and on every seed.
  const Row* floor_mean = nullptr;
  const Row* floor_every = nullptr;
  for (const Row& r : rows) {
    if (r.ok == 0 || r.failed > 0) continue;
    if (r.d_train <= f.tolerance && r.d_val <= f.tolerance &&
        (floor_mean == nullptr || r.codec_bytes < floor_mean->codec_bytes)) {
      floor_mean = &r;
    }
    if (r.d_train_max <= f.tolerance && r.d_val_max <= f.tolerance &&
        (floor_every == nullptr || r.codec_bytes < floor_every->codec_bytes)) {
      floor_every = &r;
    }
  }
  std::printf("\nall runs done in %.1f s\n\n%s\n", wall, absl::StrJoin(table, "\n").c_str());
  std::printf(
      "\nmost compressed codec within %.1f%% of fp32 (train and val loss): %s on average over the "
      "seeds, %s on every seed\n",
      f.tolerance, floor_mean != nullptr ? floor_mean->codec.c_str() : "none",
      floor_every != nullptr ? floor_every->codec.c_str() : "none");
  if (!f.markdown.empty()) {
    std::ofstream md(f.markdown);
    md << absl::StrJoin(table, "\n") << "\n";
  }
  if (!f.curves.empty()) {
    std::ofstream csv(f.curves);
    csv << "codec,seed,step,loss\n";
    for (const RunResult& r : results) {
      for (size_t i = 0; i < r.losses.size(); ++i) {
        csv << r.codec << "," << r.seed << "," << i + 1 << "," << r.losses[i] << "\n";
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Convergence study: loss and cut bytes of each codec on a 2-fragment model"};
  app.add_option("--job", f.job, "Job file: model, data, steps, batch, optimizer")
      ->capture_default_str();
  app.add_option("--codecs", f.codecs,
                 "Codec specs (space-separated), each for both directions or as FORWARD/BACKWARD "
                 "(activations/gradients, e.g. q4/q2:sr), optionally with @TIED, a codec with "
                 "error feedback for the tied-embedding gradients (fp32@q2); default: the "
                 "controller's ladder, fp16, q2, q2:sr and three top-k variants; fp32 is always "
                 "added. A prefix subK: trains the subspace-cut variant with K coordinates on the "
                 "cut (sub16:q8), subKfF: with its last F layers unconstrained (sub16f1:q8), "
                 "compared with the job's model in fp32");
  app.add_option("--steps", f.steps, "Steps per run (0: the job's)")->capture_default_str();
  app.add_option("--first-seed", f.first_seed, "First seed (-1: the job's)")->capture_default_str();
  app.add_option("--seeds", f.seeds, "Seeds per codec: the first seed, +1, ...")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--jobs", f.jobs, "Runs at once")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--threads", f.threads, "Kernel threads per run (0: all cores)")
      ->capture_default_str();
  app.add_option("--last", f.last, "Steps averaged for the final training loss")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--progress", f.progress, "Steps between progress lines (0: none)")
      ->capture_default_str();
  app.add_option("--verify-steps", f.verify_steps,
                 "Steps of the fp32-over-frames vs FragmentChain check (0: skip)")
      ->capture_default_str();
  app.add_option("--tolerance", f.tolerance, "Loss tolerance for the suggested floor, percent")
      ->capture_default_str();
  app.add_option("--markdown", f.markdown, "Also write the table to this file");
  app.add_option("--curves", f.curves, "Write every step's loss as CSV to this file");
  CLI11_PARSE(app, argc, argv);
  return Run(f);
}
