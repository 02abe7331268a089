// Replica study: what syncing pipeline replicas sparsely and compressed costs in loss and
// saves in bytes, against replicas that sum exact gradients every step.
//
// The model of a job file (default configs/job.example.yaml) is trained as N replicas in one
// process (fleet/local_fleet.h), each on its own shard of the job's data with the job's
// microbatches per step, for the job's steps: once in `step` mode with the exact codec (the
// baseline: one model training the union batch), and once per (every, codec) in `local` mode
// (DiLoCo: `every` inner AdamW steps, then the outer Nesterov step on the mean pseudo-gradient,
// sent with the codec and error feedback). All runs of one N and seed see the same tokens.
// The table reports per run: the final training loss (mean of the last --last steps) and
// validation loss, each against the baseline of the same N and seed, and the bytes per
// trained token that the syncs put on the links between replicas (an all-gather: each
// replica's frame to every other; with --reduce ring, every hop of the rings), with their
// ratio to the baseline's. --overlap streams the syncs behind the next inner steps and
// --stagger P syncs the layers in P phases at staggered steps (sync.overlap, sync.stagger).
// --reduce gossip mixes each replica's parameters with --fanout others per round instead of
// any collective (fleet/gossip_mixer.h; --missing-links drops a fraction of the links each
// round), and its line gives the replicas' mean consensus distance before a round; --tracking
// on runs it with gradient tracking too ("+gt": a correction per replica, gossip_node.h).
// With a dense lossy codec (--codecs q4) gossip sends every coordinate as each link's
// compressed difference ("q4 links": fleet/gossip_links.h; a job's `sync: {reduce: gossip,
// codec: q4}`, which the daemons run too).
// --skewed-shards gives replica r the r-th contiguous part of the training text instead of its
// share of one shuffled stream (replicas on different data: what tracking is for).
//
// Runs are independent and deterministic (one backend thread each); --jobs only changes the
// wall time.
//
//   bazel build //tools/bench:replica_study
//   bazel-bin/tools/bench/replica_study --replicas 2 4 --every 10 50 \
//       --codecs q4 topk:0.03+q4 topk:0.01+q8 --seeds 3 --jobs 2
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

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/job/spec/job_spec.h"
#include "fleet/gossip_links.h"
#include "fleet/local_fleet.h"
#include "fleet/sync_options.h"
#include "kernels/ops.h"
#include "model/data_loader.h"
#include "model/job.h"
#include "model/trainer.h"

namespace {

using namespace longhaul;  // NOLINT(google-build-using-namespace)
using Clock = std::chrono::steady_clock;

struct Flags {
  std::string job = "configs/job.example.yaml";
  std::vector<int> replicas = {2, 4};
  std::vector<int> every = {10, 50};
  std::vector<int> overlap = {0};  // sync.overlap: inner steps a sync streams behind
  std::vector<int> stagger = {1};  // sync.stagger: phases of a round
  std::vector<int> warmup = {0};   // sync.warmup: steps synced every step at the start
  std::vector<std::string> codecs = {"q4", "topk:0.03+q4", "topk:0.01+q8"};
  std::vector<std::string> reduce = {"gather"};  // sync.reduce of the local-mode runs
  std::vector<std::string> step_codecs;          // step-mode runs with these codecs (gather, ring)
  bool step_only = false;                        // no local-mode runs
  int fanout = 1;                                // gossip: out-neighbours per round
  double missing_links = 0;                      // gossip: links down in each round
  std::string graph = "random";                  // gossip: random or exponential
  std::vector<std::string> tracking = {"off"};   // gossip: gradient tracking, "off" and/or "on"
  bool skewed_shards = false;                    // replica r: the r-th part of the text
  float outer_lr = 1.0f;                         // unless given: the job spec's default of each run
  float outer_momentum = 0.0f;
  bool outer_lr_given = false;
  bool outer_momentum_given = false;
  int steps = 0;  // 0: the job's
  int seeds = 3;
  int jobs = 2;
  int last = 10;
  int progress = 100;
  double tolerance = 2.0;    // percent
  bool no_baseline = false;  // the local-mode runs only
  std::string markdown;
  std::string curves;
  // Each replica's microbatches per step, for the runs with as many replicas (every mode, the
  // step/exact reference included, so all train the same union batch); empty: the job's each.
  std::vector<int> replica_microbatches;
};

struct RunSpec {
  int replicas = 1;
  uint64_t seed = 0;
  fleet::SyncOptions sync;
  double missing_links = 0;  // gossip
  // Gossip over compressed links (fleet/gossip_links.h): each link's differences in this dense
  // codec (sync.codec is then exact); empty: fp32 shares of sync.codec's top-k.
  std::string Codec() const {
    return fleet::GossipSendsLinks(sync) ? sync.codec + " links" : sync.codec;
  }
  std::string label() const {
    return sync.mode == fleet::SyncMode::kStep
               ? absl::StrCat("N=", replicas, " step ", sync.codec, Reduce())
               : absl::StrCat("N=", replicas, " local/", sync.every,
                              sync.overlap > 0 ? absl::StrCat("+", sync.overlap) : "",
                              sync.stagger > 1 ? absl::StrCat(" x", sync.stagger) : "",
                              sync.warmup > 0 ? absl::StrCat(" warm ", sync.warmup) : "", " ",
                              Codec(), Reduce(), Outer());
  }
  // " m0.5", " lr0.7 m0.9": an outer step other than plain averaging (which says nothing).
  std::string Outer() const {
    const fleet::OuterOptions& o = sync.outer;
    if (fleet::IsPlainAveraging(o)) return "";
    return absl::StrCat(o.lr == 1.0f ? "" : absl::StrCat(" lr", o.lr), " m", o.momentum);
  }
  // The step/exact reference every other run of its N and seed is compared with.
  bool baseline() const {
    return sync.mode == fleet::SyncMode::kStep && sync.codec == "exact" &&
           sync.reduce == fleet::SyncReduce::kGather;
  }
  std::string Reduce() const {
    switch (sync.reduce) {
      case fleet::SyncReduce::kRing:
        return " ring";
      case fleet::SyncReduce::kGossip:
        return absl::StrCat(
            sync.exponential_graph ? " gossip/exp" : absl::StrCat(" gossip/", sync.fanout),
            missing_links > 0 ? absl::StrFormat(" -%.0f%%", 100 * missing_links) : "",
            sync.tracking ? " +gt" : "");
      default:
        return "";
    }
  }
};

struct RunResult {
  RunSpec spec;
  std::string error;
  std::vector<float> losses;
  double train_loss = 0, val_loss = 0;
  double bytes_per_token = 0;
  double seconds = 0;
  double consensus = -1;  // gossip: the mean consensus distance before a round
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

void TrainOne(const model::Job& job, const std::shared_ptr<const model::TokenData>& train,
              const std::shared_ptr<const model::TokenData>& val, const Flags& f, Printer* out,
              RunResult* r) {
  const auto start = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  auto fail = [&](const Status& s) {
    r->error = std::string(s.message());
    out->Line("[%-28s seed %d] FAILED after %d steps: %s", r->spec.label(), r->spec.seed,
              r->losses.size(), r->error);
  };
  std::vector<std::unique_ptr<kernels::Ops>> owned;
  std::vector<kernels::Ops*> ops;
  for (int i = 0; i < r->spec.replicas; ++i) {
    auto o = kernels::MakeOps(job.backend, 1);
    if (!o.ok()) return fail(o.status());
    ops.push_back(o->get());
    owned.push_back(std::move(*o));
  }
  fleet::LocalFleetOptions o;
  o.replicas = r->spec.replicas;
  o.batch_size = job.microbatch_size;
  o.seq_len = job.seq_len;
  o.microbatches = job.microbatches();
  if (static_cast<int>(f.replica_microbatches.size()) == r->spec.replicas) {
    o.replica_microbatches = f.replica_microbatches;
  }
  o.seed = r->spec.seed;
  o.sync = r->spec.sync;
  o.missing_links = r->spec.missing_links;
  o.skewed_shards = f.skewed_shards;
  auto fl = fleet::LocalFleet::Create(job.model, train, o, ops);
  if (!fl.ok()) return fail(fl.status());
  (*fl)->InitParameters(r->spec.seed);
  double consensus_sum = 0;
  int rounds = 0;
  for (int step = 0; step < job.steps; ++step) {
    auto s = (*fl)->TrainStep(job.optimizer, step, job.steps);
    if (!s.ok()) return fail(s.status());
    if (!std::isfinite(s->loss)) return fail(absl::InternalError("loss is not finite"));
    r->losses.push_back(s->loss);
    if (s->consensus >= 0) {
      consensus_sum += s->consensus;
      ++rounds;
    }
    if (f.progress > 0 && (step + 1) % f.progress == 0 && step + 1 < job.steps) {
      out->Line("[%-28s seed %d] step %4d/%d  loss %.4f  %6.1f s", r->spec.label(), r->spec.seed,
                step + 1, job.steps, s->loss, elapsed());
    }
  }
  const int last = std::min<int>(f.last, static_cast<int>(r->losses.size()));
  double sum = 0;
  for (int i = static_cast<int>(r->losses.size()) - last; i < static_cast<int>(r->losses.size());
       ++i) {
    sum += r->losses[i];
  }
  r->train_loss = sum / std::max(last, 1);
  if (rounds > 0) r->consensus = consensus_sum / rounds;
  // Every replica holds the same model after the last step's sync (gossip: its final exact
  // average): evaluate replica 0.
  model::DataLoaderOptions lo;
  lo.batch_size = job.microbatch_size;
  lo.seq_len = job.seq_len;
  lo.seed = r->spec.seed;
  lo.shuffle = false;
  auto loader = model::DataLoader::Create(val, lo);
  if (!loader.ok()) return fail(loader.status());
  auto v = (*fl)->replica(0).MeanLoss(**loader, job.data.val_batches);
  if (!v.ok()) return fail(v.status());
  r->val_loss = *v;
  const fleet::FleetTraffic& t = (*fl)->traffic();
  r->bytes_per_token = t.tokens > 0 ? double(t.wire_bytes) / double(t.tokens) : 0;
  const double final_per_token = t.tokens > 0 ? double(t.final_bytes) / double(t.tokens) : 0;
  r->seconds = elapsed();
  out->Line("[%-28s seed %d] done in %.1f s: train %.4f (last %d)  val %.4f  %.1f bytes/token%s",
            r->spec.label(), r->spec.seed, r->seconds, r->train_loss, last, r->val_loss,
            r->bytes_per_token,
            r->consensus >= 0
                ? absl::StrFormat("  (%.1f of them the final average)  consensus distance %.3g",
                                  final_per_token, r->consensus)
                : "");
}

std::string Percent(double p) { return absl::StrFormat("%+.2f%%", p); }

std::string OuterText(const Flags& f) {
  if (!f.outer_lr_given && !f.outer_momentum_given) {
    return "a job's default for each run (lr 1; momentum 0.5 from every 10 on, 0 below, with "
           "gossip or top-k)";
  }
  return absl::StrFormat(
      "lr %s momentum %s", f.outer_lr_given ? absl::StrFormat("%g", f.outer_lr) : "a job's",
      f.outer_momentum_given ? absl::StrFormat("%g", f.outer_momentum) : "a job's");
}

int Run(Flags f) {
  auto loaded = model::LoadJob(f.job, daemon::PipelineJobKeys());
  if (!loaded.ok()) {
    std::fprintf(stderr, "replica_study: %s\n", std::string(loaded.status().message()).c_str());
    return 1;
  }
  model::Job job = *loaded;
  if (f.steps > 0) job.steps = f.steps;
  for (const std::string& c : f.codecs) {
    fleet::SyncOptions s;
    s.codec = c;
    const Status ok = fleet::ValidateSyncOptions(s);
    if (!ok.ok() || c == "adaptive") {
      std::fprintf(stderr, "replica_study: codec '%s': %s\n", c.c_str(),
                   ok.ok() ? "a fixed codec is needed" : std::string(ok.message()).c_str());
      return 1;
    }
  }
  for (const std::string& r : f.reduce) {
    if (auto parsed = fleet::ParseSyncReduce(r); !parsed.ok() || r == "auto") {
      std::fprintf(stderr, "replica_study: --reduce: %s\n",
                   parsed.ok() ? "gather, ring or gossip (auto is the planner's choice, not the "
                                 "fleet's)"
                               : std::string(parsed.status().message()).c_str());
      return 1;
    }
  }
  const model::ModelConfig& c = job.model;
  auto train = model::LoadData(job.data.train, job.data.format, 1, c.vocab_size, "data.train");
  if (!train.ok()) {
    std::fprintf(stderr, "replica_study: %s\n", std::string(train.status().message()).c_str());
    return 1;
  }
  if (job.data.val.empty()) {
    std::fprintf(stderr, "replica_study: %s has no data.val\n", f.job.c_str());
    return 1;
  }
  auto val = model::LoadData(job.data.val, job.data.format, 2, c.vocab_size, "data.val");
  if (!val.ok()) {
    std::fprintf(stderr, "replica_study: %s\n", std::string(val.status().message()).c_str());
    return 1;
  }
  std::vector<RunResult> results;
  for (int s = 0; s < f.seeds; ++s) {
    for (int n : f.replicas) {
      RunResult base;
      base.spec.replicas = n;
      base.spec.seed = job.seed + s;
      base.spec.sync.mode = fleet::SyncMode::kStep;
      base.spec.sync.codec = "exact";
      if (!f.no_baseline) results.push_back(base);
      // Step mode with a lossy codec: every step's gradients through it (error feedback).
      for (const std::string& codec : f.step_codecs) {
        for (const std::string& reduce : f.reduce) {
          RunResult r = base;
          r.spec.sync.codec = codec;
          r.spec.sync.reduce = *fleet::ParseSyncReduce(reduce);
          if (r.spec.sync.reduce == fleet::SyncReduce::kGossip) continue;
          results.push_back(r);
        }
      }
      for (int every : f.every) {
        if (f.step_only) break;
        for (int stagger : f.stagger) {
          for (int overlap : f.overlap) {
            // Only valid schedules: a phase's sync ends before the next phase's starts.
            if (stagger > every || stagger > c.num_layers ||
                (overlap > 0 && overlap >= every / stagger)) {
              continue;
            }
            for (const std::string& codec : f.codecs) {
              for (const std::string& reduce : f.reduce) {
                RunResult r = base;
                r.spec.sync.reduce = *fleet::ParseSyncReduce(reduce);
                r.spec.sync.mode = fleet::SyncMode::kLocal;
                r.spec.sync.every = every;
                r.spec.sync.overlap = overlap;
                r.spec.sync.stagger = stagger;
                r.spec.sync.codec = codec;
                // Without --outer-lr or --outer-momentum the job spec's default for the run's
                // reduce, codec and cadence (fleet::DefaultOuterStep); one given, the other
                // from it.
                r.spec.sync.outer = fleet::DefaultOuterStep(r.spec.sync);
                if (f.outer_lr_given) r.spec.sync.outer.lr = f.outer_lr;
                if (f.outer_momentum_given) r.spec.sync.outer.momentum = f.outer_momentum;
                if (r.spec.sync.reduce == fleet::SyncReduce::kGossip) {
                  // Gossip mixes parameters (plain averaging unless --outer-lr or
                  // --outer-momentum is given: then each replica's outer step before the mix,
                  // the one not given 1 or 0);
                  // stagger and overlap do not apply, and its codec sends the top-k fraction
                  // as fp32 shares; a dense lossy codec (q4, ...) sends every coordinate's
                  // difference over each link (fleet/gossip_links.h).
                  if (stagger > 1 || overlap > 0) continue;
                  r.spec.sync.fanout = f.fanout;
                  r.spec.missing_links = f.missing_links;
                  r.spec.sync.exponential_graph = f.graph == "exponential";
                  if (r.spec.sync.exponential_graph) r.spec.sync.fanout = 1;
                  if (!fleet::GossipKeep(r.spec.sync).ok() &&
                      !fleet::GossipSendsLinks(r.spec.sync)) {
                    continue;
                  }
                  for (const std::string& t : f.tracking) {
                    r.spec.sync.tracking = t == "on";
                    for (int warmup : f.warmup) {
                      r.spec.sync.warmup = warmup;
                      if (fleet::ValidateSyncOptions(r.spec.sync).ok()) results.push_back(r);
                    }
                  }
                  continue;
                }
                for (int warmup : f.warmup) {
                  r.spec.sync.warmup = warmup;
                  results.push_back(r);
                }
              }
            }
          }
        }
      }
    }
  }
  absl::PrintF(
      "replica study: %s (%s): L=%d C=%d V=%d T=%d, %.2fM parameters; %d steps x %d "
      "microbatches of %d per replica, lr %g; outer step (Nesterov) %s; %zu runs, %d "
      "at once%s%s\n",
      f.job, job.name, c.num_layers, c.channels, c.vocab_size, job.seq_len,
      model::NumParameters(c) / 1e6, job.steps, job.microbatches(), job.microbatch_size,
      job.optimizer.lr, OuterText(f), results.size(), f.jobs,
      f.replica_microbatches.empty()
          ? std::string()
          : "; microbatches per replica " + absl::StrJoin(f.replica_microbatches, "/"),
      f.skewed_shards ? "; skewed shards (replica r: the r-th part of the text)" : "");
  std::fflush(stdout);
  Printer printer;
  std::atomic<size_t> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < std::max(1, f.jobs); ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < results.size(); i = next++) {
        TrainOne(job, *train, *val, f, &printer, &results[i]);
      }
    });
  }
  for (std::thread& t : workers) t.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  // One row per configuration: means over the seeds of the differences to the baseline of
  // the same N and seed, and the worst seed.
  struct Row {
    std::string label;
    int ok = 0, failed = 0;
    std::string error;
    double train = 0, val = 0, d_train = 0, d_val = 0, worst = -1e30, bytes = 0, ratio = 0;
    bool compared = true;   // false: --no-baseline, the losses and bytes alone
    bool baseline = false;  // the step/exact reference's own row
  };
  std::vector<Row> rows;
  for (const RunResult& r : results) {
    if (r.spec.seed != job.seed) continue;  // one row per configuration
    Row row;
    row.label = r.spec.label();
    row.baseline = r.spec.baseline();
    for (const RunResult& x : results) {
      if (x.spec.label() != row.label) continue;
      const RunResult* base = nullptr;
      for (const RunResult& b : results) {
        if (b.spec.replicas == x.spec.replicas && b.spec.seed == x.spec.seed && b.spec.baseline() &&
            b.error.empty()) {
          base = &b;
        }
      }
      if (x.error.empty() && base == nullptr && f.no_baseline) {
        ++row.ok;
        row.compared = false;
        row.train += x.train_loss;
        row.val += x.val_loss;
        row.bytes += x.bytes_per_token;
        continue;
      }
      if (!x.error.empty() || base == nullptr) {
        ++row.failed;
        row.error = x.error.empty() ? "baseline failed" : x.error;
        continue;
      }
      ++row.ok;
      row.train += x.train_loss;
      row.val += x.val_loss;
      const double dt = 100 * (x.train_loss / base->train_loss - 1);
      const double dv = 100 * (x.val_loss / base->val_loss - 1);
      row.d_train += dt;
      row.d_val += dv;
      row.worst = std::max({row.worst, dt, dv});
      row.bytes += x.bytes_per_token;
      row.ratio += base->bytes_per_token / std::max(x.bytes_per_token, 1e-12);
    }
    if (row.ok > 0) {
      for (double* v : {&row.train, &row.val, &row.d_train, &row.d_val, &row.bytes, &row.ratio}) {
        *v /= row.ok;
      }
    }
    rows.push_back(row);
  }
  std::vector<std::string> table = {
      "| run | train loss | vs step/exact | val loss | vs step/exact | worst seed | "
      "sync bytes/token | less than step/exact |",
      "| --- | --- | --- | --- | --- | --- | --- | --- |"};
  for (const Row& r : rows) {
    if (r.ok == 0) {
      table.push_back(absl::StrCat("| ", r.label, " | failed: ", r.error, " |"));
      continue;
    }
    // The baseline's own row, or a run with no baseline to compare with (--no-baseline).
    const bool base = r.baseline || !r.compared;
    table.push_back(absl::StrFormat(
        "| %s%s | %.4f | %s | %.4f | %s | %s | %.2f | %s |", r.label,
        r.failed > 0 ? absl::StrCat(" (", r.failed, " seeds failed)") : "", r.train,
        base ? "-" : Percent(r.d_train), r.val, base ? "-" : Percent(r.d_val),
        base ? "-" : Percent(r.worst), r.bytes,
        !r.compared ? "-"
        : base      ? "1x"
                    : absl::StrFormat("%.0fx%s", r.ratio,
                                 r.worst <= f.tolerance && r.ratio >= 100 ? " ✓" : "")));
  }
  std::printf("\nall runs done in %.1f s\n\n%s\n", wall, absl::StrJoin(table, "\n").c_str());
  // The mark's legend where a row could carry it (--no-baseline compares nothing).
  if (std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.compared; })) {
    std::printf(
        "\n✓: within %.1f%% of step/exact on every seed (train and val) at >= 100x fewer "
        "bytes per token\n",
        f.tolerance);
  } else {
    std::printf(
        "\nno step/exact runs (--no-baseline): compare each line with its seed's step/exact from "
        "another run\n");
  }
  if (!f.markdown.empty()) {
    std::ofstream md(f.markdown);
    md << absl::StrJoin(table, "\n") << "\n";
  }
  if (!f.curves.empty()) {
    std::ofstream csv(f.curves);
    csv << "run,seed,step,loss\n";
    for (const RunResult& r : results) {
      for (size_t i = 0; i < r.losses.size(); ++i) {
        csv << r.spec.label() << "," << r.spec.seed << "," << i + 1 << "," << r.losses[i] << "\n";
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Replica study: loss and sync bytes of local-step, compressed replica sync"};
  app.add_option("--job", f.job, "Job file: model, data, steps, batch, optimizer")
      ->capture_default_str();
  app.add_option("--replicas", f.replicas, "Replica counts N")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--replica-microbatches", f.replica_microbatches,
                 "Each replica's microbatches per step, for the runs with that many replicas "
                 "(all modes: the same union batch); default: the job's for each")
      ->check(CLI::Range(1, 4096));
  app.add_option("--warmup", f.warmup,
                 "sync.warmup: the first steps each sync with plain averaging (gossip: a round "
                 "each, without an outer step of its own) before --every takes over (several: "
                 "one run each)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--every", f.every, "Inner steps per outer step (local mode)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--overlap", f.overlap,
                 "Inner steps a sync streams behind (sync.overlap; 0: blocking; values not "
                 "below --every are skipped)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--stagger", f.stagger,
                 "Phases of a staggered sync round (sync.stagger: layer l syncs in phase l mod "
                 "P, each phase at its own step; 1: all at once; values above --every or the "
                 "model's layers, or with an --overlap not below every / P, are skipped)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--codecs", f.codecs,
                 "Sync codecs for local mode: exact, or a codec spec (q4, topk:0.01+q8, ...); "
                 "error feedback on every lossy one")
      ->capture_default_str();
  app.add_option("--reduce", f.reduce,
                 "How the local-mode runs' syncs sum (sync.reduce): gather (every frame to "
                 "every replica), ring (chunks around a ring, re-encoded with error feedback at "
                 "each hop), gossip (each replica mixes its parameters with --fanout others "
                 "drawn each round: plain averaging unless --outer-lr or --outer-momentum is "
                 "given; codecs exact and topk:F as fp32 shares, a dense lossy codec (q4, q8, "
                 "bf16) as each link's compressed differences (fleet/gossip_links.h), the "
                 "others skipped; the step/exact "
                 "reference always gathers)")
      ->capture_default_str();
  app.add_option("--step-codecs", f.step_codecs,
                 "Also step-mode runs whose every step's gradients go through each of these "
                 "codecs (error feedback on lossy ones), once per --reduce gather or ring: "
                 "compressed every-step sync against step/exact")
      ->capture_default_str();
  app.add_flag("--step-only", f.step_only, "No local-mode runs (the step-mode ones only)");
  app.add_option("--fanout", f.fanout, "Gossip: out-neighbours per replica and round")
      ->capture_default_str()
      ->check(CLI::Range(1, 63));
  app.add_option("--graph", f.graph,
                 "Gossip: each round's graph drawn from the links (random: --fanout "
                 "out-neighbours, fast links more often) or the one-peer exponential graph "
                 "(exponential: offsets 1, 2, 4, ... in turn, backward every other period, one "
                 "out-neighbour; "
                 "fleet::ExponentialGossipGraph)")
      ->capture_default_str()
      ->check(CLI::IsMember({"random", "exponential"}));
  app.add_option("--missing-links", f.missing_links,
                 "Gossip: the fraction of links missing in each round (a changing graph)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--tracking", f.tracking,
                 "Gossip: gradient tracking off and/or on (each a run; on: a correction per "
                 "replica that its local steps apply, the drifts mixed beside the parameters)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "on"}));
  app.add_flag("--skewed-shards", f.skewed_shards,
               "Replica r reads the r-th of N contiguous parts of the training text (its "
               "windows shuffled), every run the step/exact reference included: replicas on "
               "different data");
  app.add_flag("--no-baseline", f.no_baseline,
               "Skip the step/exact runs (deterministic: one run gives a seed's baseline for "
               "good); the table then has no comparisons, each run's line its losses");
  app.add_option("--outer-lr", f.outer_lr,
                 "Outer learning rate (default: a job's, by reduce, codec and cadence: 1)");
  app.add_option("--outer-momentum", f.outer_momentum,
                 "Outer Nesterov momentum (default: a job's: 0 for gossip, top-k and every "
                 "below 10, 0.5 from every 10 on; fleet::DefaultOuterStep)");
  app.add_option("--steps", f.steps, "Steps per run (0: the job's)")->capture_default_str();
  app.add_option("--seeds", f.seeds, "Seeds: the job's, +1, ...")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_option("--jobs", f.jobs, "Runs at once")->capture_default_str()->check(CLI::Range(1, 64));
  app.add_option("--last", f.last, "Steps averaged for the final training loss")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--progress", f.progress, "Steps between progress lines (0: none)")
      ->capture_default_str();
  app.add_option("--tolerance", f.tolerance, "Loss tolerance, percent")->capture_default_str();
  app.add_option("--markdown", f.markdown, "Also write the table to this file");
  app.add_option("--curves", f.curves, "Write every step's loss as CSV to this file");
  CLI11_PARSE(app, argc, argv);
  f.outer_lr_given = app.count("--outer-lr") > 0;
  f.outer_momentum_given = app.count("--outer-momentum") > 0;
  return Run(f);
}
