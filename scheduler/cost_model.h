// The cost model of one 1F1B training step of a pipeline plan, on steady links. For each
// stage it prices the forward and backward compute of its layers (profiles.h's FLOP
// conventions over the site's FLOP/s), the codec work on its compute thread, its AdamW step
// and its memory (model::Fragment::EstimateMemory, with the slots the stage runner
// allocates); for each link the activations (plus targets) and activation gradients under
// the codec the runtime's controller settles on (compression::Controller's predictions and
// rules, fed as StageRunner feeds it: budget = 2 x the sending stage's backward time, the
// EWMA's limit, and 50 ms for the activations sent before the first backward), and the exact fp32
// exchange of the tied embedding's gradient between the first and last stage. It then plays
// the step's schedule exactly as the stage runner runs it: warm-up forwards, one forward one
// backward, drain; one FIFO sender per directed link (wire time = encoded bytes / bandwidth,
// then rtt/2 of flight); the tied exchange; the coordinator's barrier; the optimizer step.
// The step time is the time between two barrier decisions; the bottleneck is read off the
// critical path of that schedule (which resource the step spent its time waiting for).
//
// StepSeconds is the fast path for planners (no strings, no breakdown); Estimate explains.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "compression/controller.h"
#include "model/config.h"
#include "scheduler/placement.h"
#include "scheduler/profiles.h"

namespace longhaul::scheduler {

struct ScheduleInputs;  // scheduler/schedule.h

inline constexpr double kInfeasible = std::numeric_limits<double>::infinity();

struct CostModelOptions {
  // The ladder and codec throughputs the runtime's controller uses.
  compression::ControllerOptions controller;
  // Of a codec's predicted compute time, the share spent encoding on the sender's compute
  // thread; the rest is the receiver's decode.
  double encode_fraction = 0.5;
  // StageRunner's controller budget before its first backward has been timed.
  double initial_budget_seconds = 0.05;
  // Which codec a link settles on. kUnderNoise (real links): the controller's attractor when
  // estimates jitter -- the least lossy codec that fits the budget with the upgrade margin,
  // else the least lossy that fits, else the fastest (a codec that fits only without margin
  // is downgraded by the first noisy estimate and never upgraded back). kReplay: the
  // controller's decisions replayed on noise-free inputs from the job's start (what the
  // simulator on steady links does; for tests).
  enum class Settling { kUnderNoise, kReplay };
  Settling settling = Settling::kUnderNoise;
};

// A pipeline by index: sites[i] indexes Profiles::sites, layers[i] is stage i's layer count.
struct Pipeline {
  std::vector<int> sites;
  std::vector<int> layers;
  bool operator==(const Pipeline&) const = default;
};

// One tensor over one directed link.
struct TransferCost {
  int rung = 0;
  double wire_bytes = 0;
  double wire_seconds = 0;     // occupies the link's sender: wire_bytes / bandwidth
  double latency_seconds = 0;  // rtt / 2, after the last byte leaves
  double encode_seconds = 0;   // on the sender's compute thread
  double decode_seconds = 0;   // on the receiver's
};

struct StageEstimate {
  std::string site;
  int layer_begin = 0, layer_end = 0;
  double forward_seconds = 0, backward_seconds = 0;  // compute per microbatch
  double codec_seconds = 0;                          // encode + decode per microbatch on this stage
  double optimizer_seconds = 0;                      // per step
  // What StageRunner reports as compute_seconds: M x (forward + backward) + optimizer.
  double compute_seconds = 0;
  double idle_seconds = 0;  // of the step, not computing or coding
  int slots = 0;
  int64_t memory_bytes = 0, memory_limit_bytes = 0;  // limit 0: none
  int64_t parameters = 0;
};

struct LinkEstimate {
  std::string from, to;
  std::string kind;  // "activations", "gradients" or "tied-embedding"
  std::string codec;
  std::string reason;       // the controller's explanation
  double tensor_bytes = 0;  // raw fp32 bytes of one tensor
  TransferCost cost;
  double busy_seconds = 0;  // wire time per step
};

// Time on the step's critical path attributed to one resource.
struct CriticalShare {
  std::string kind;      // compute | bandwidth | latency | tied-exchange | barrier | optimizer
  std::string resource;  // "stage 2 (gamma)", "link beta -> gamma", ...
  double seconds = 0;
};

struct StepEstimate {
  std::vector<StageEstimate> stages;
  std::vector<LinkEstimate> links;
  int microbatches = 0;
  int64_t tokens_per_step = 0;
  double step_seconds = 0;
  double tokens_per_second = 0;
  // Analytic steady state: the per-microbatch period the 1F1B schedule cannot beat, and the
  // term that sets it (a stage's compute, a link's wire time, or the round-trip latency
  // that a stage's in-flight window must cover).
  double period_seconds = 0;
  std::string period_limit;
  double tied_exchange_seconds = 0;  // from the first stage's last backward to its wte ready
  bool fits_memory = true;
  // The critical path, largest share first, and the kind that dominates it.
  std::vector<CriticalShare> critical_path;
  CriticalShare bottleneck;  // seconds: the whole kind's total; resource: its largest part
  std::string bottleneck_description;
};

class CostModel {
 public:
  // Validates profiles, workload (B, T, M > 0, T <= context, codecs on the ladder).
  static StatusOr<CostModel> Create(const model::ModelConfig& model,
                                    const PipelineWorkload& workload, const Profiles& profiles,
                                    const CostModelOptions& options = {});

  // The full estimate of a plan naming sites of the profiles.
  StatusOr<StepEstimate> Estimate(const std::vector<StagePlan>& plan) const;
  // Seconds per step, or kInfeasible when a stage does not fit its site or a link is missing.
  double StepSeconds(const Pipeline& p) const;
  // Analytic steady-state period per microbatch (see StepEstimate::period_seconds).
  double PeriodSeconds(const Pipeline& p, std::string* limit = nullptr) const;

  StatusOr<Pipeline> FromPlan(const std::vector<StagePlan>& plan) const;
  std::vector<StagePlan> ToPlan(const Pipeline& p) const;

  // ---- primitives, shared with the planner so that both price everything the same way --
  const model::ModelConfig& model() const { return model_; }
  const PipelineWorkload& workload() const { return workload_; }
  const Profiles& profiles() const { return profiles_; }
  const compression::Controller& controller() const { return controller_; }
  int num_sites() const { return static_cast<int>(profiles_.sites.size()); }
  int num_layers() const { return model_.num_layers; }
  int microbatches() const { return workload_.microbatches; }
  // Compute per microbatch of n layers on `site` (the last stage also runs the head).
  double Forward(int site, int n, bool last) const;
  double Backward(int site, int n, bool last) const;
  // Raw bytes of one activation (or activation gradient) tensor; `wide`: at a cut after the
  // subspace-cut variant's first unconstrained layer (C floats per position, not K).
  double ActivationBytes(bool wide = false) const;
  // Whether the cut after `boundary` layers is wide (model::StreamWidth).
  bool WideCut(int boundary) const;
  // Activations (+ targets) or gradients sent with the sender's controller budget.
  TransferCost Activation(int from, int to, double budget_seconds, bool wide = false) const;
  TransferCost Gradient(int from, int to, double budget_seconds, bool wide = false) const;
  TransferCost TiedGradient(int from, int to) const;
  bool HasLink(int from, int to) const;
  double HalfRtt(int a, int b) const;               // 0 when a == b, inf without a link
  int coordinator() const { return coordinator_; }  // -1: the first stage's site
  const CostModelOptions& options() const { return options_; }
  int fixed_rung() const { return fixed_rung_; }  // -1: adaptive
  // The adaptive floor of a cut: a narrow cut of the subspace-cut variant (its coordinates)
  // has the workload's coordinate_floor, any other the floor.
  int floor_rung(bool wide = false) const {
    return !wide && model_.residual_subspace > 0 ? coordinate_floor_rung_ : floor_rung_;
  }
  // One activation (with_targets) or gradient tensor under a given rung.
  TransferCost PriceRung(int from, int to, int rung, bool with_targets, bool wide = false) const;
  // The tied-embedding gradient's raw bytes (0: an untied head).
  double TiedBytes() const { return tied_bytes_; }
  // Whether the first and last stages exchange the tied embedding's gradient (model::TiedHead:
  // the standard GPT-2, a tied llama); an untied head (subspace-cut variant, untied llama) has
  // no exchange, and its first and last stages need no link between them.
  bool TiedExchange() const { return tied_bytes_ > 0; }
  // The controller's own decision (with its explanation) in the settled state of PickRung.
  compression::Decision SteadyDecision(int from, int to, double raw_bytes, double budget_seconds,
                                       double first_budget) const;
  // Bytes a stage allocates on one device, and whether that fits `site`.
  int64_t Memory(int n, bool first, bool last, int slots) const;
  // What the stage takes at `site`: Memory's on a site of one device; on a site of several
  // (SiteProfile::devices), sharded across them as little as it must (shard_plan.h's
  // LeastShardedBytes), all its devices together. -1 when there is no such stage.
  int64_t SiteMemory(int site, int n, bool first, bool last, int slots) const;
  // Whether the stage fits the site: SiteMemory within memory_bytes, and on several devices
  // each device's share within device_memory_bytes (each where set).
  bool Fits(int site, int n, bool first, bool last, int slots) const;
  int64_t Parameters(int n, bool first, bool last) const;
  double Optimizer(int site, int n, bool first, bool last) const;
  // The controller budget a stage gives its outbound tensors: 2 x its backward time.
  double Budget(int site, int n, bool last) const { return 2 * Backward(site, n, last); }

 private:
  CostModel(const model::ModelConfig& model, const PipelineWorkload& workload,
            const Profiles& profiles, const CostModelOptions& options,
            compression::Controller controller);
  // The rung the controller settles on for a link and budget (see Settling); for kReplay its
  // first decision saw `first_budget` (<= 0: the budget itself) and Decide's rules are
  // replayed on its predictions until nothing changes (test/scheduler/cost_model_test.cc
  // checks both against Decide itself).
  int PickRung(int from, int to, double budget_seconds, double first_budget,
               bool wide = false) const;
  // Fills the schedule of `p`; false when a link is missing or (check_memory) a stage does
  // not fit its site.
  bool BuildSchedule(const Pipeline& p, ScheduleInputs* in, bool check_memory = true) const;

  model::ModelConfig model_;
  PipelineWorkload workload_;
  Profiles profiles_;
  CostModelOptions options_;
  compression::Controller controller_;
  int floor_rung_ = 0, fixed_rung_ = -1;  // fixed_rung_ >= 0: no adaptation
  int coordinate_floor_rung_ = 0;
  int fp32_rung_ = 0;
  int coordinator_ = -1;
  double layer_fwd_flops_ = 0, head_fwd_flops_ = 0;
  int max_slots_ = 1;
  std::vector<int64_t> memory_;  // [n][position][slots]
  // Sites of several devices: a device's least sharded bytes, by device count, as memory_.
  std::map<int, std::vector<int64_t>> sharded_memory_;
  // The row of memory_ (and of each sharded_memory_) for a stage; -1: no such stage.
  int64_t MemoryAt(const std::vector<int64_t>& table, int n, bool first, bool last,
                   int slots) const;
  std::vector<int64_t> params_;  // [n][position]
  // Per ordered site pair (from * N + to); bandwidth 0: no link.
  std::vector<double> bw_, rtt_;
  // One activation tensor under each rung: encoded bytes and codec compute (Controller's
  // prediction); targets and tied-embedding gradients travel as fp32.
  std::vector<double> rung_wire_bytes_[2], rung_codec_seconds_[2];  // [wide][rung]
  double targets_bytes_ = 0, targets_codec_seconds_ = 0;
  double tied_bytes_ = 0, tied_wire_bytes_ = 0, tied_codec_seconds_ = 0;
};

}  // namespace longhaul::scheduler
