// A distributed job: the train-local job schema (model/job.h) plus what only a pipeline
// needs, in the same YAML file:
//
//   sites: [alpha, beta, gamma]      # candidate sites (placement: even: the pipeline order;
//                                    # first = data, last = loss)
//   placement: planned               # planned (default): the planner picks order, split and
//                                    # sites from measurements | even: as listed, even split
//   compression:
//     mode: adaptive                 # off (exact fp32) | fixed | adaptive (default)
//     codec: q8                      # mode fixed: the codec for activations and gradients
//     floor: q4                      # mode adaptive: the most lossy codec allowed (unset: q4,
//                                    # and q8 on a cut of subspace coordinates)
//     gradients:                     # optional, per direction (also activations:): its own
//       ladder: [fp32, bf16, q8:sr, q4:sr]  # controller ladder (least lossy first; default
//       floor: q4:sr                 # the controller's), floor and fixed codec, each on
//       codec: q8:sr                 # that ladder (default: the shared codec / floor)
//     tied: exact                    # the tied-embedding gradient exchange between the first
//                                    # and last stage: exact (default) or a codec with error
//                                    # feedback (q8, q4, q2, topk:0.1+q8; model/tied_exchange.h)
//   replan: on                       # move layers away from a straggler (default on)
//   sharding: auto                   # a site with several CPU devices: how each stage's
//                                    # layers are held across them (model/shard_mode.h):
//                                    # replicate | zero1 | zero2 | zero3 for every layer, or
//                                    # auto (default): zero1, and where that does not fit the
//                                    # site's memory the cost model's choice per layer
//   replicas: 2                      # pipeline replicas (default 1): with placement: even,
//                                    # replica r runs on sites[r*S .. (r+1)*S), S = sites /
//                                    # replicas, every replica with the same even split; with
//                                    # placement: planned the planner picks each replica's
//                                    # sites among the listed ones and splits them alike or
//                                    # each its own, whichever is predicted faster
//                                    # (scheduler/replica_planner.h); auto: it also picks how
//                                    # many, for the most tokens/s (placement: planned only)
//   replica_stages: [3, 1]           # placement: even: each replica's stage count (default
//                                    # sites / replicas each), the sites listed replica by
//                                    # replica, each replica's layers split evenly over its
//                                    # own: replicas may be split differently, a slice of
//                                    # the parameters syncing between the stages that hold it
//                                    # (sync_routes.h)
//   replica_microbatches: [6, 2]     # each replica's microbatches (of microbatch_size
//                                    # sequences) per step, one per replica (default:
//                                    # batch_size / microbatch_size each): a slower replica
//                                    # gets fewer, so none waits for another (step mode: the
//                                    # union batch is still summed; local mode: each
//                                    # pseudo-gradient weighs by its replica's tokens);
//                                    # placement: even | paced (placement: planned): the
//                                    # planner gives each replica the most microbatches whose
//                                    # predicted step fits the fastest replica's
//                                    # (scheduler::PaceReplicas), the fastest batch_size /
//                                    # microbatch_size
//   sync:                            # how the replicas stay in sync (fleet/sync_options.h)
//     mode: local                    # step: gradients summed across replicas every step
//                                    # local (default): `every` inner steps, then an outer step
//     every: 50                      # local: inner steps per outer step
//     overlap: 0                     # local: inner steps a sync streams behind (0: each sync
//                                    # blocks; k in 1..every-1: the replicas train k more
//                                    # steps while its frames cross, then the outer step
//                                    # applies and each keeps what those k steps moved;
//                                    # no checkpoint may fall inside: k - 1 steps after a
//                                    # sync step; the last step's sync blocks)
//     stagger: 1                     # local: phases of a sync round (Streaming DiLoCo): layer
//                                    # l syncs in phase l mod stagger (the embeddings with
//                                    # layer 0, the final layernorm with the last), phase p
//                                    # after the steps k every + p every / stagger, so each
//                                    # sync carries 1/stagger of the parameters and a link
//                                    # the same bytes spread over the round; 1..layers,
//                                    # <= every; overlap then < every / stagger; every phase
//                                    # syncs after the last step
//     outer: {lr: 1, momentum: 0.5, nesterov: true}     # local: the outer Nesterov SGD;
//                                    # defaults by the sync (fleet::DefaultOuterStep): lr 1,
//                                    # momentum 0.5 from every 10 on; plain averaging (lr 1,
//                                    # momentum 0) below every 10, with gossip or a top-k
//                                    # codec (on real text DiLoCo's lr 0.7, momentum 0.9 lost
//                                    # 29% every 5 steps, plain averaging 3.8%); resolved by
//                                    # the coordinator at submit and sent to every site
//     warmup: 0                      # local: the first `warmup` steps each end in a
//                                    # blocking sync of every slice with plain averaging (a
//                                    # gossip round each, gossip without an outer step of
//                                    # its own); `every` and the outer step take over after
//                                    # them (the replicas train apart once training's first,
//                                    # fastest phase is behind them; 2.5% of the steps took
//                                    # 0.3 points off the q4 ring's gap on real text,
//                                    # BENCHMARKS.md)
//     codec: q4                      # what crosses between replicas, with error feedback on
//                                    # lossy codecs: exact | bf16 | q8 | q4 | q2 |
//                                    # topk:F+CODEC ... (its outer step defaults to plain
//                                    # averaging: error feedback is the momentum, see the
//                                    # replica study in BENCHMARKS.md; default: exact in step
//                                    # mode, q4 in local mode) |
//                                    # adaptive: per sync, the least lossy of fp32..q4 that
//                                    # fits 10% of the compute between syncs on the group's
//                                    # slowest measured link (daemon/job/sync/sync_codec.h)
//     reduce: gather                 # how a sync group sums (fleet/sync_options.h): gather
//                                    # (default): every holder of a slice sends its frame to
//                                    # every other, N - 1 frames out of each | ring: the live
//                                    # replicas in replica order pass chunks around a ring
//                                    # (fleet/sync_ring.h), 2 (N - 1) / N of a frame out of
//                                    # each, re-encoded with error feedback at every hop
//                                    # (exact: the same sums in another order); a plan split
//                                    # per replica whose tied embedding copies differ gathers
//                                    # | auto (placement: planned): the planner prices both
//                                    # on the measured links, a site's flows sharing its
//                                    # uplink (scheduler/replica_planner.h), and picks |
//                                    # gossip (mode local, stagger 1, overlap 0): no sum; at
//                                    # each sync every replica mixes its parameters with
//                                    # `fanout` others drawn that round from the job's seed
//                                    # (sparse push-sum, fleet/gossip_node.h; codec exact,
//                                    # the default, or topk:F: the fraction of each slice
//                                    # sent; the outer step defaults to plain averaging, and
//                                    # a given one each replica takes on its own
//                                    # pseudo-gradient before its mix), and after the last
//                                    # step one exact average
//     fanout: 1                      # gossip: out-neighbours per replica and round, >= 1
//     graph: random                  # gossip: random (each round's `fanout` drawn from the
//                                    # measured links, fast ones more often) | exponential
//                                    # (fanout 1: the one-peer exponential graph, replica i to
//                                    # i + 1, 2, 4, ... in turn, then i - 1, 2, 4, ...; with
//                                    # 2^k replicas each k rounds give the exact average; a
//                                    # link down skips its round)
//     on_site_loss: drop             # a replica's site lost: drop (local mode's default, with
//                                    # checkpoint.every > 0): the other replicas go on from the
//                                    # committed step, it rejoins from a live replica's state
//                                    # at the first committed step after its sites answer
//                                    # again; in step mode the live replicas train its
//                                    # microbatches meanwhile (the union batch kept,
//                                    # RedistributeMicrobatches) | wait (step mode's default):
//                                    # all roll back and wait
//   volunteers: [epsilon]            # sites that may join the running job by themselves,
//                                    # each as a new replica (its site config's volunteer:
//                                    # names this job and its coordinator; the coordinator
//                                    # adds it as `longhaul job add-site` would); sync mode
//                                    # local, peers of the job's sites, not in `sites`
//
// A job with replicas (or auto) is not re-planned (a straggler's layers would have to move in
// every replica). The planner places replicas for the built-in data only: token files live on
// the first listed site.
//
// On a daemon, relative data paths resolve against its data_dir.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/status.h"
#include "fleet/sync_options.h"
#include "model/data_loader.h"
#include "model/job.h"
#include "model/shard_mode.h"
#include "scheduler/placement.h"
#include "scheduler/replica_planner.h"

namespace longhaul::daemon {

enum class CompressionMode { kOff, kFixed, kAdaptive };
struct JobSpec;

// Most pipeline replicas a job may have.
inline constexpr int kMaxReplicas = 256;
// Most microbatches one replica may train per step (replica_microbatches).
inline constexpr int kMaxReplicaMicrobatches = 4096;

// Validation batches per pass (data.val's val_batches; 0 without data.val). A pass runs on
// the pipeline after each step val_every divides and after the last, as extra microbatches
// M, M+1, ... of that step that go forward only.
inline int ValBatches(const model::Job& job) {
  return job.data.val.empty() ? 0 : job.data.val_batches;
}
inline bool ValDue(const model::Job& job, uint64_t done) {
  return ValBatches(job) > 0 &&
         (done == static_cast<uint64_t>(job.steps) ||
          (job.data.val_every > 0 && done % static_cast<uint64_t>(job.data.val_every) == 0));
}

struct JobSpec {
  model::Job job;
  std::string yaml;  // the job file as submitted
  std::vector<std::string> sites;
  // volunteers: sites that may join the running job by themselves (their site config's
  // `volunteer:`), each then as `longhaul job add-site` would add it; sync mode local only.
  std::vector<std::string> volunteers;
  CompressionMode compression = CompressionMode::kAdaptive;
  std::string codec = "q8";  // kFixed
  std::string floor = "q4";  // kAdaptive
  bool floor_given = false;  // compression.floor was in the job file
  // compression.activations / compression.gradients: each direction's own ladder, floor and
  // fixed codec; empty fields are the shared codec and floor and the default ladder.
  struct DirectionCodecs {
    std::vector<std::string> ladder;
    std::string codec, floor;
  };
  DirectionCodecs activations, gradients;
  std::string tied_codec = "exact";  // compression.tied
  bool replan = true;                // move layers away from a straggler
  // sharding: how a site with several CPU devices holds each stage's layers across them
  // (model/shard_mode.h). Empty (auto): zero1, or where that does not fit the site's memory,
  // the cost model's choice per layer (scheduler/shard_plan.h). A mode: every layer so.
  std::optional<model::ShardMode> sharding;
  // extra_in_flight: microbatches each stage keeps in flight beyond plain 1F1B's, to cover
  // the links' round trips (scheduler/in_flight.h). kAutoInFlight: chosen each step from the
  // measured round trips and compute, within the stage's memory; 0: plain 1F1B.
  static constexpr int kAutoInFlight = -1;
  int extra_in_flight = kAutoInFlight;
  // true (placement: planned): the planner chooses the order of `sites`, the split and which
  // sites to leave out, from the sites' calibrations and links (site_profile.h); false
  // (placement: even): `sites` in the listed order, the layers split evenly.
  bool planned = true;
  // Pipeline replicas; with placement: even `sites` holds replicas x stages sites. 0: auto,
  // the planner chooses (placement: planned); a plan's own count is StageGrid::OfPlan's.
  int replicas = 1;
  fleet::SyncOptions sync;
  // Each replica's microbatches per step (replica_microbatches); empty: the job's for all.
  // A running job reads them from its plan (PlanMicrobatches), where the coordinator records
  // these or, with `paced`, the planner's.
  std::vector<int> replica_microbatches;
  bool paced = false;  // replica_microbatches: paced
  int microbatches(int replica) const {
    return replica >= 0 && replica < static_cast<int>(replica_microbatches.size())
               ? replica_microbatches[static_cast<size_t>(replica)]
               : job.microbatches();
  }
  // Each replica's stage count under placement: even (replica_stages); empty: sites /
  // replicas each.
  std::vector<int> replica_stages;
  // Replica r's stages under placement: even, and the index of its first site in `sites`.
  int stages(int replica = 0) const {
    return replica >= 0 && replica < static_cast<int>(replica_stages.size())
               ? replica_stages[static_cast<size_t>(replica)]
               : static_cast<int>(sites.size()) / std::max(replicas, 1);
  }
  int first_site(int replica) const {
    int first = 0;
    for (int r = 0; r < replica; ++r) first += stages(r);
    return first;
  }
};

// The floor of a cut that carries the subspace-cut variant's coordinates when the job gives
// none (neither compression.floor nor the direction's own): the lossiest lossy rung of at
// least this many bits per value (q8 on the default ladder, q8:sr on a stochastic one). A
// coordinate is dense, and q4 on it costs loss that q8 does not (docs/BENCHMARKS.md,
// subspace-cut variant: sub8f2 at 300 steps +18% with q4, +8% with q8; in the pipeline
// bench 74 steps to the target with the controller's q4 coordinates against 67 with q8),
// for about 1 ms more per tensor at 20 Mbit/s.
inline constexpr int kCoordinateFloorBits = 8;

// The codecs of one direction (activations forward, gradients back), the shared codec,
// floor and default ladder filling what compression.activations / .gradients leave out;
// `coordinates`: the direction's cut carries subspace coordinates (model::CoordinateBoundary),
// whose default floor has kCoordinateFloorBits.
JobSpec::DirectionCodecs ResolvedCodecs(const JobSpec& spec, bool gradients,
                                        bool coordinates = false);
// OK when each direction's codec and floor are rungs of its ladder; errors name the key.
Status CheckDirectionCodecs(const JobSpec& spec);

// The top-level keys a distributed job adds to the train-local schema (model/job.h), in the
// order ParseJobSpec reads them: the names in its table of key parsers (job_spec_parse.cc),
// where a new key is one row. train-local and the tools that read job files pass them to
// model::LoadJob, which accepts and ignores them.
absl::Span<const absl::string_view> PipelineJobKeys();

// Parses and validates a job (errors name SOURCE:LINE:COLUMN and the key).
StatusOr<JobSpec> ParseJobSpec(const std::string& yaml, const std::string& source,
                               const std::string& base_dir);

const char* CompressionModeName(CompressionMode mode);

// Replica r's part of the training data, `microbatches` being every replica's per step: one
// step's windows of every replica form a round, replica r's (B x its microbatches) after
// those of the replicas before it (model/data_loader.h), so a step of all replicas reads
// what one pipeline training the union batch reads.
void SetReplicaShard(const JobSpec& spec, const std::vector<int>& microbatches, int replica,
                     model::DataLoaderOptions* options);

// Each replica's microbatches per step as its plan records them (StageInfo.microbatches of
// its stages; CheckPlan has checked them), or the job's where a plan predates them (0).
template <class StageList>
std::vector<int> PlanMicrobatches(const JobSpec& spec, int replicas, const StageList& stages) {
  std::vector<int> m;
  for (int r = 0; r < replicas; ++r) {
    int recorded = 0;  // its first stage's
    for (const auto& s : stages) {
      if (static_cast<int>(s.replica()) == r) {
        recorded = static_cast<int>(s.microbatches());
        break;
      }
    }
    m.push_back(recorded > 0 ? recorded : spec.microbatches(r));
  }
  return m;
}

// Sync mode step with dropped replicas (sync.on_site_loss: drop): their microbatches go to
// the live ones (Malleus-style), each live replica taking a share in proportion to its own
// (the remainder one each, in replica order), so that a step still trains the union batch and
// reads the same data (model/data_loader.h: the same rounds, cut differently). A dropped
// replica's count is 0. Unchanged with none dropped, or none live.
std::vector<int> RedistributeMicrobatches(const std::vector<int>& planned,
                                          const std::vector<bool>& dropped);

// Each replica's microbatches in an attempt: PlanMicrobatches, redistributed in sync mode step
// away from the replicas in `dropped` (the assignment's or the record's dropped_replicas).
template <class StageList, class ReplicaList>
std::vector<int> AttemptMicrobatches(const JobSpec& spec, int replicas, const StageList& stages,
                                     const ReplicaList& dropped) {
  std::vector<int> m = PlanMicrobatches(spec, replicas, stages);
  if (spec.sync.mode != fleet::SyncMode::kStep) return m;
  std::vector<bool> out(static_cast<size_t>(replicas), false);
  for (auto r : dropped) {
    if (r >= 0 && static_cast<uint64_t>(r) < static_cast<uint64_t>(replicas)) {
      out[static_cast<size_t>(r)] = true;
    }
  }
  return RedistributeMicrobatches(m, out);
}

// What the planner and cost model need of a job: the model, its microbatches and compression,
// over `sites` (candidates, in the preferred order).
scheduler::PlacementRequest PlacementRequestFor(const JobSpec& spec,
                                                const std::vector<std::string>& sites);

// What the replica planner needs of a job with replicas (or auto) over `request`: aligned
// replicas (PlanPlacement also tries each replica with its own split), the job's count
// exactly or (auto) the best, a sync priced in the job's sync codec every step (mode step) or every
// `every` steps, not hidden behind the steps (the runtime's syncs block).
StatusOr<scheduler::ReplicaPlanRequest> ReplicaPlanRequestFor(
    const JobSpec& spec, const scheduler::PlacementRequest& request);

// The replicas a planned job runs: PlanReplicas as ReplicaPlanRequestFor asks, once with the
// replicas split alike and once each with its own split (paced by microbatches when the job
// is paced); the more tokens/s in lockstep wins, alike on a tie. The coordinator and
// `longhaul plan` both take this.
StatusOr<scheduler::ReplicaPlan> PlanJobReplicas(const JobSpec& spec,
                                                 const scheduler::Planner& planner,
                                                 const scheduler::PlacementRequest& request);

}  // namespace longhaul::daemon
