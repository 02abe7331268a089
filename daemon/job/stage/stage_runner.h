// StageRunner: one site's stage of one job attempt. It builds the fragment for its layers
// on the job's kernel backend, loads the committed checkpoint (or initialises from the
// seed), and runs the 1F1B schedule step after step: forward microbatches in, activations
// (and targets) out to the next stage, activation gradients back to the previous one, every
// outbound tensor compressed with the codec the link's controller picks. After a step's
// backward pass it exchanges the tied-embedding gradient parts, reports its gradient sums to
// the coordinator (a barrier that returns the global clipping scale), steps AdamW, and
// checkpoints every `checkpoint.every` steps. It never blocks compute on a send: senders
// have their own threads and queues. What crosses the links (codecs, encoding, pending sends,
// receiving and decoding) is the StageExchange's (stage_exchange.h).
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/file_env.h"
#include "common/mutex.h"
#include "daemon/job/exchange/inbox.h"
#include "daemon/job/exchange/sender.h"
#include "daemon/job/exchange/stage_exchange.h"
#include "daemon/job/site/runtime_env.h"
#include "daemon/job/spec/job_spec.h"
#include "daemon/job/spec/stage_grid.h"
#include "daemon/job/stage/step_reporter.h"
#include "daemon/job/sync/replica_sync.h"
#include "daemon/link_monitor.h"
#include "daemon/transport/link.h"
#include "kernels/ops.h"
#include "model/data_loader.h"
#include "model/fragment.h"
#include "model/replicated_fragment.h"
#include "model/tied_exchange.h"

namespace longhaul::daemon {

struct StageRunnerContext {
  std::string site;
  v1::StageAssignment assignment;
  JobSpec spec;
  std::string job_dir;  // this site's directory for the job
  // kernels::MakeOps names, one per data-parallel replica (site_backend.h); empty: the job's
  // backend, one replica.
  std::vector<std::string> backends;
  Inbox* inbox = nullptr;  // owned by the job host; outlives the runner
  transport::Link* coordinator = nullptr;
  std::unique_ptr<LinkSender> to_prev, to_next;  // null at the ends of the pipeline
  // First and last stage of a multi-stage job: to each other, for the tied embedding.
  std::unique_ptr<LinkSender> to_tied;
  // Pipeline replicas: to the stages of the live other replicas this stage sends sync frames
  // to (the routes' `to`, sync_routes.h), by flat stage.
  std::map<int, std::unique_ptr<LinkSender>> to_sync;
  LinkMonitor* monitor = nullptr;
  std::shared_ptr<spdlog::logger> log;
  // Debug knob (fault injection): extra seconds of "compute" per layer and microbatch.
  std::shared_ptr<std::atomic<double>> throttle;
  // A stage waiting for a tensor checks its own senders for failures this often.
  double heartbeat_seconds = 1.0;
  // extra_in_flight auto: what the stage's memory may grow to with extra activation slots
  // (the site's limit, or without one half the machine's memory); 0: no extra slots.
  int64_t in_flight_memory_bytes = 0;
  // Links to other sites (to fetch moved layers when the plan changed).
  std::function<transport::Link*(const std::string&)> channel;
  // The daemon's (job/site/runtime_env.h): the stage's disk and clock (its checkpoints and sync
  // states are written and read through env.files, and its times, in the status, step reports,
  // the exchanges' waits and the codecs' windows, are env.files->NowSeconds()), and where a
  // single-replica stage gets its device codecs.
  RuntimeEnv env;
};

struct StageRunnerStatus {
  bool running = false;
  bool finished = false;   // ran its last step
  std::string error;       // why it stopped, if it failed
  bool permanent = false;  // ...on the job's input data (InputDataError): no retry can help
  uint64_t step = 0;       // steps completed
  uint64_t checkpoint_step = 0;
  double compute_seconds = 0, wait_seconds = 0, step_seconds = 0;  // last step
  std::vector<OutboundUsage> outbound;
};

class StageRunner {
 public:
  // Builds the fragment and loads state; fails (naming why) when the job cannot run here,
  // e.g. the fragment does not fit this site's memory.
  static StatusOr<std::unique_ptr<StageRunner>> Create(StageRunnerContext context,
                                                       int64_t memory_limit_bytes);
  ~StageRunner();

  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops the attempt (the thread notices at its next wait) and joins.
  void Stop();
  StageRunnerStatus status() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t memory_bytes() const { return memory_bytes_; }
  // The kernel backends of the replicas, e.g. "cpu" or "cuda:0, cuda:1".
  const std::string& devices() const { return devices_; }
  uint32_t attempt() const { return ctx_.assignment.attempt(); }
  // Gossip: `removed` replicas left the job for good while this attempt runs (the
  // coordinator's KIND_REMOVE_REPLICAS): their stages count as gone from now on, unasked.
  void RemoveReplicas(std::span<const uint32_t> removed) ABSL_LOCKS_EXCLUDED(peers_mu_);
  // Gossip: whether this stage left `replica` out of the round after `step` (found it lost
  // then), for that replica's stage waiting for its frames (a peer's KIND_PING with
  // gossip_step). Remembered for the last kUnsentKept such rounds of each replica.
  bool Unsent(uint32_t replica, uint64_t step) ABSL_LOCKS_EXCLUDED(peers_mu_);
  static constexpr size_t kUnsentKept = 4096;
  // Gossip: the coordinator's link matrix `links`, epoch `epoch`, draws the rounds from
  // `from_round` on (KIND_GOSSIP_LINKS; gossip_round.h). FAILED_PRECONDITION when this stage
  // has drawn that round's graph already (its peers would mix by another); INVALID_ARGUMENT
  // for an epoch out of order or a matrix that does not fit the attempt (CheckGossipLinks
  // over the replicas neither dropped nor removed).
  Status SetGossipLinks(uint32_t epoch, uint64_t from_round, std::vector<double> links)
      ABSL_LOCKS_EXCLUDED(peers_mu_);

 private:
  explicit StageRunner(StageRunnerContext context) : ctx_(std::move(context)) {}
  double Now() const { return ctx_.env.files->NowSeconds(); }  // the context's clock

  Status Init(int64_t memory_limit_bytes);
  // Loads the state of this stage's layers at `step` from the stages of `old_plan` that
  // held them (a re-plan moved layers), and checkpoints it here.
  Status Migrate(const google::protobuf::RepeatedPtrField<v1::StageInfo>& old_plan, uint64_t step);
  // A rejoining replica's stage (replica_membership.h): takes the outer-step state (anchor
  // and momentum; the anchor as its parameters), AdamW moments and data position (its own
  // shard's) of its layers from the stages of the live replica assignment.rejoin_source that
  // hold them (however that replica is split) at `step`, with no error-feedback residual,
  // and checkpoints it here.
  Status Rejoin(uint64_t step);
  // The data loader at step `step` from a checkpointed state `state` (`from` names it in
  // errors), re-expressed when it was cut for other microbatches or another replica.
  Status RestoreLoaderAt(uint64_t step, const std::string& state, const std::string& from);
  Status Throttle();
  void Run();
  Status RunStep(uint64_t step);
  Status Forward(uint64_t step, int mb, double* loss_sum);
  Status Backward(uint64_t step, int mb);
  Status ExchangeTiedGrads(uint64_t step);
  // data.val (stage_runner_val.cc): the validation pass after `done` steps, as microbatches
  // M_.. of step `step` that go forward only; the last stage keeps the mean loss for its
  // next report.
  Status InitValidation();
  Status Validate(uint64_t step, uint64_t done);
  Status Checkpoint(uint64_t step);
  // Pipeline replicas and the tied codec (stage_runner_sync.cc): the ReplicaSync and the
  // tied residual, restored from the sync state of the checkpoint at `resume_step` (0: from
  // scratch); CheckpointSync writes that state beside a stage checkpoint.
  Status InitSync(uint64_t resume_step);
  // stage_runner_links.cc: the StageExchange with the pipeline neighbours and tied partner.
  Status InitExchange(kernels::Ops* ops);
  Status CheckpointSync(uint64_t step);
  // Gossip: how stage `stage` of this job stands (PeerStatus), from a ping of its site: gone
  // when it stopped in this attempt, runs a later one, did not answer kPingsToGone pings in a
  // row, or runs no stage of this attempt kStartupGraceSeconds after this stage started; at
  // once when its replica was removed (RemoveReplicas).
  PeerStatus PeerStatusOf(int stage) ABSL_LOCKS_EXCLUDED(peers_mu_);
  // Gossip: whether running stage `stage` left this stage's replica out of the round after
  // `step` (asked of its site: JobCommand.gossip_step).
  bool PeerSkippedMe(int stage, uint64_t step);
  // KIND_PING of stage `stage`'s site (2 s at most), with `gossip_step` (PeerSkippedMe's
  // question; 0: none). NotFound when it has no link.
  StatusOr<v1::JobCommandResponse> PingStage(int stage, uint64_t gossip_step = 0);
  static constexpr int kPingsToGone = 3;
  static constexpr double kStartupGraceSeconds = 120;
  // Gossip: the clipping scale of this stage's replica from its stages' gradient sums
  // (`sums`, this stage's), passed along the replica's pipeline without the coordinator:
  // the stages after this one send theirs toward the first stage (TENSOR_KIND_GRAD_SUMS),
  // which sends the replica's whole sums back (TENSOR_KIND_GRAD_TOTAL).
  StatusOr<float> ReplicaClipScale(uint64_t step, std::vector<double> sums);
  // Receives the fragment's (B,T,C) input: where it landed, the exchange's host buffer or,
  // decoded on the device, the fragment's DeviceInput().
  StatusOr<const float*> ReceiveInput(v1::TensorKind kind, uint64_t step, int mb);
  // extra_in_flight auto: this stage's warm-ups for the next step from the step decision,
  // checked against its slots.
  Status TakeWarmups(const v1::StepDecision& decision);
  // Replicas the step decision removes (gather and ring jobs): this stage's own stops it
  // (Aborted, as a stop it was told: not a failure), others leave its syncs from this step on
  // (ReplicaSync::Leave).
  Status TakeLeaving(const v1::StepDecision& decision);

  StageRunnerContext ctx_;
  // stage_: the flat index in the plan (stage_grid.h); pos_: the position in its replica of
  // num_stages_ stages.
  StageGrid grid_;
  int num_stages_ = 0, stage_ = 0, pos_ = 0, B_ = 0, T_ = 0, C_ = 0, M_ = 0;
  // Warm-up forwards this step (scheduler/pipeline_order.h) and the most the activation
  // slots hold (slots - 1): plain 1F1B's, a fixed extra_in_flight's, or the coordinator's
  // WAN-aware choice from the previous step's decision.
  int warmup_ = 0, max_warmup_ = 0;
  bool warmups_changed_ = false;
  // Floats per position of the stream entering and leaving this stage (model::StreamWidth).
  int in_width_ = 0, out_width_ = 0;
  // The subspace-cut variant: the targets frame holds each sequence's T + 1 tokens, inputs
  // and targets, since later stages rebuild the stream from the tokens.
  bool window_ = false;
  int64_t memory_bytes_ = 0;
  std::string devices_;
  std::vector<std::unique_ptr<kernels::Ops>> ops_;  // one per replica
  std::unique_ptr<model::ReplicatedFragment> fragment_;
  std::unique_ptr<StageExchange> exchange_;
  std::unique_ptr<ReplicaSync> replicas_;  // with pipeline replicas
  // Gossip replicas: reports sent behind the steps (null: the barrier's wait).
  std::unique_ptr<StepReporter> reporter_;
  // First or last stage of a job with a lossy compression.tied; null otherwise.
  std::unique_ptr<model::TiedGradCodec> tied_codec_;
  std::unique_ptr<model::DataLoader> loader_;
  std::unique_ptr<model::DataLoader> val_loader_;  // first stage, with data.val
  int val_batches_ = 0;                            // per pass (0: no validation)
  uint64_t val_step_ = 0;                          // last stage: a pass not reported yet
  double val_loss_ = 0;
  std::vector<int32_t> tokens_, targets_;
  std::vector<std::vector<int32_t>> slot_targets_;
  std::vector<std::vector<int32_t>> slot_tokens_;  // window_: each slot's input tokens
  uint64_t start_step_ = 0;
  bool migrate_ = false;           // Run fetches the stage's layers from the old plan's sites first
  bool rejoin_ = false;            // Run fetches the stage's state from a live replica first
  std::vector<int> microbatches_;  // each replica's per step (AttemptMicrobatches)
  uint64_t last_committed_ = 0, previous_committed_ = 0;  // the two checkpoints kept

  std::atomic<bool> stop_{false};
  std::thread thread_;
  double compute_acc_ = 0, wait_acc_ = 0;  // the stage's thread only (copied into status_)
  mutable Mutex mu_;
  StageRunnerStatus status_ ABSL_GUARDED_BY(mu_);
  double started_at_ = 0;  // Start's time (Now)
  // PeerStatusOf's: by stage, the pings in a row its site did not answer (asked from the
  // stage's thread and a gossip exchange's receiver), and the replicas removed mid-attempt.
  Mutex peers_mu_;
  std::map<int, int> unanswered_pings_ ABSL_GUARDED_BY(peers_mu_);
  std::set<uint32_t> removed_replicas_ ABSL_GUARDED_BY(peers_mu_);
  // Gossip: by replica, the steps of the rounds this stage left it out of, oldest first.
  std::map<uint32_t, std::deque<uint64_t>> unsent_ ABSL_GUARDED_BY(peers_mu_);
  // Gossip: the attempt's link matrices by round, and the latest round drawn (links_at).
  GossipLinkSchedule gossip_links_ ABSL_GUARDED_BY(peers_mu_);
  std::optional<uint64_t> drawn_round_ ABSL_GUARDED_BY(peers_mu_);
};

}  // namespace longhaul::daemon
