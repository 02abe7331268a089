// What a distributed job's spec says beyond its keys (job_spec.h): the codecs each direction
// uses, replicas' data shards and microbatches, and the planner's requests. Parsing the job
// file is job_spec_parse.cc.
#include "daemon/job/spec/job_spec.h"

#include <numeric>
#include <set>

#include "absl/strings/numbers.h"
#include "common/yaml_walker.h"
#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "compression/controller.h"
#include "fleet/gossip_link_node.h"
#include "fleet/gossip_node.h"
#include "model/tied_exchange.h"

namespace longhaul::daemon {

const char* CompressionModeName(CompressionMode mode) {
  switch (mode) {
    case CompressionMode::kOff:
      return "off";
    case CompressionMode::kFixed:
      return "fixed";
    default:
      return "adaptive";
  }
}

namespace {

// The lossiest dense, lossy rung of at least kCoordinateFloorBits per value before `floor` on
// `ladder` (which runs from the least lossy; never exact), or `floor` when there is none or
// the ladder or floor is bad (CheckDirectionCodecs reports those).
std::string CoordinateFloor(const std::vector<std::string>& ladder, const std::string& floor) {
  compression::ControllerOptions o;
  o.ladder = ladder;
  auto controller = compression::Controller::Create(o);
  if (!controller.ok()) return floor;
  auto at = controller->FindRung(floor);
  if (!at.ok()) return floor;
  std::string chosen = floor;
  for (int r = 0; r < *at; ++r) {
    const compression::CodecSpec& rung = controller->spec(r);
    if (!rung.topk.enabled && !rung.lossless() && rung.value.bits() >= kCoordinateFloorBits) {
      chosen = ladder[static_cast<size_t>(r)];
    }
  }
  return chosen;
}

}  // namespace

JobSpec::DirectionCodecs ResolvedCodecs(const JobSpec& spec, bool gradients, bool coordinates) {
  JobSpec::DirectionCodecs d = gradients ? spec.gradients : spec.activations;
  if (d.ladder.empty()) d.ladder = compression::ControllerOptions().ladder;
  if (d.codec.empty()) d.codec = spec.codec;
  if (d.floor.empty()) {
    d.floor = coordinates && !spec.floor_given ? CoordinateFloor(d.ladder, spec.floor) : spec.floor;
  }
  return d;
}

Status CheckDirectionCodecs(const JobSpec& spec) {
  for (bool gradients : {false, true}) {
    const JobSpec::DirectionCodecs& given = gradients ? spec.gradients : spec.activations;
    const JobSpec::DirectionCodecs d = ResolvedCodecs(spec, gradients);
    // Errors name the key the value came from: the direction's own, or the shared one.
    const std::string own = std::string("compression.") + (gradients ? "gradients" : "activations");
    auto key = [&](const std::string& name, bool overridden) {
      return (overridden ? own + "." : std::string("compression.")) + name;
    };
    const std::string ladder = given.ladder.empty() ? "the default ladder" : own + ".ladder";
    compression::ControllerOptions o;
    o.ladder = d.ladder;
    auto controller = compression::Controller::Create(o);
    if (!controller.ok()) return Annotate(controller.status(), ladder);
    if (auto r = controller->FindRung(d.floor); !r.ok()) {
      return Annotate(r.status(), key("floor", !given.floor.empty()) + " '" + d.floor +
                                      "' is not on " + ladder);
    }
    // Fixed mode sends its codec; off sends fp32.
    if (spec.compression == CompressionMode::kFixed) {
      if (auto r = controller->FindRung(d.codec); !r.ok()) {
        return Annotate(r.status(), key("codec", !given.codec.empty()) + " '" + d.codec +
                                        "' is not on " + ladder);
      }
    }
    if (spec.compression == CompressionMode::kOff) {
      if (auto r = controller->FindRung("fp32"); !r.ok()) {
        return Annotate(r.status(), ladder + " (compression off sends fp32)");
      }
    }
  }
  return absl::OkStatus();
}

void SetReplicaShard(const JobSpec& spec, const std::vector<int>& microbatches, int replica,
                     model::DataLoaderOptions* options) {
  std::vector<int64_t> blocks;
  for (int m : microbatches) blocks.push_back(int64_t{spec.job.microbatch_size} * m);
  model::SetShard(blocks, replica, options);
}

std::vector<int> RedistributeMicrobatches(const std::vector<int>& planned,
                                          const std::vector<bool>& dropped) {
  int64_t gone = 0, kept = 0;
  for (size_t r = 0; r < planned.size(); ++r) {
    (r < dropped.size() && dropped[r] ? gone : kept) += planned[r];
  }
  if (gone == 0 || kept == 0) return planned;
  std::vector<int> m(planned.size(), 0);
  int64_t given = 0;
  for (size_t r = 0; r < planned.size(); ++r) {
    if (r < dropped.size() && dropped[r]) continue;
    const int64_t share = gone * planned[r] / kept;
    m[r] = planned[r] + static_cast<int>(share);
    given += share;
  }
  for (size_t r = 0; given < gone; r = (r + 1) % planned.size()) {
    if (r < dropped.size() && dropped[r]) continue;
    ++m[r];
    ++given;
  }
  return m;
}

scheduler::PlacementRequest PlacementRequestFor(const JobSpec& spec,
                                                const std::vector<std::string>& sites) {
  scheduler::PlacementRequest request;
  request.model = spec.job.model;
  request.sites = sites;
  scheduler::PipelineWorkload& w = request.workload;
  w.microbatch_size = spec.job.microbatch_size;
  w.seq_len = spec.job.seq_len;
  w.microbatches = spec.job.microbatches();
  w.compression = CompressionModeName(spec.compression);
  w.codec = spec.codec;
  w.floor = spec.floor;
  w.coordinate_floor = ResolvedCodecs(spec, /*gradients=*/false, /*coordinates=*/true).floor;
  w.extra_in_flight = spec.extra_in_flight;
  return request;
}

StatusOr<scheduler::ReplicaPlanRequest> ReplicaPlanRequestFor(
    const JobSpec& spec, const scheduler::PlacementRequest& request) {
  scheduler::ReplicaPlanRequest r;
  r.request = request;
  r.aligned = true;
  r.max_replicas = spec.replicas > 0 ? spec.replicas : kMaxReplicas;  // auto: up to the most
  r.exact_count = spec.replicas > 0;
  r.paced = spec.paced;
  r.sync.every = spec.sync.mode == fleet::SyncMode::kStep ? 1 : spec.sync.every;
  r.sync.overlap = spec.sync.mode == fleet::SyncMode::kStep ? 0 : spec.sync.overlap;
  r.sync.stagger = spec.sync.mode == fleet::SyncMode::kStep ? 1 : spec.sync.stagger;
  r.sync.reduce =
      spec.sync.reduce == fleet::SyncReduce::kRing     ? scheduler::SyncReduceCost::kRing
      : spec.sync.reduce == fleet::SyncReduce::kAuto   ? scheduler::SyncReduceCost::kCheaper
      : spec.sync.reduce == fleet::SyncReduce::kGossip ? scheduler::SyncReduceCost::kGossip
                                                       : scheduler::SyncReduceCost::kGather;
  r.sync.fanout = spec.sync.fanout;
  if (spec.sync.mode == fleet::SyncMode::kLocal && spec.job.steps > 0) {
    r.sync.warmup_fraction =
        std::min(1.0, static_cast<double>(spec.sync.warmup) / static_cast<double>(spec.job.steps));
  }
  constexpr uint64_t kValues = uint64_t{1} << 20;
  if (fleet::GossipSendsLinks(spec.sync)) {
    // Over compressed links every coordinate's difference goes in the codec, with a drift in
    // it too when tracked (fleet/gossip_link_node.h; the key frames a lost frame costs aside).
    ASSIGN_OR_RETURN(const compression::CodecSpec codec, fleet::GossipLinkCodec(spec.sync.codec));
    r.sync.bytes_per_value =
        static_cast<double>((spec.sync.tracking ? 2 : 1) *
                                compression::EstimateEncodedSize(codec, kValues) +
                            fleet::kLinkFrameFixedBytes) /
        kValues;
    return r;
  }
  if (spec.sync.reduce == fleet::SyncReduce::kGossip) {
    // A gossip frame carries each picked coordinate's fp32 value and push-sum weight, its index
    // when not every one is sent, and with tracking its drift (fleet/gossip_node.h).
    ASSIGN_OR_RETURN(const double keep, fleet::GossipKeep(spec.sync));
    const uint64_t picked = fleet::GossipPicked(keep, kValues);
    r.sync.bytes_per_value =
        static_cast<double>(fleet::GossipFrameBytes(picked, kValues, spec.sync.tracking)) / kValues;
    return r;
  }
  // adaptive is priced at its floor, the codec it falls to on a slow link.
  ASSIGN_OR_RETURN(const compression::CodecSpec codec,
                   fleet::FixedSyncCodec(spec.sync.codec == "adaptive" ? "q4" : spec.sync.codec));
  r.sync.bytes_per_value =
      static_cast<double>(compression::EstimateEncodedSize(codec, kValues)) / kValues;
  return r;
}

StatusOr<scheduler::ReplicaPlan> PlanJobReplicas(const JobSpec& spec,
                                                 const scheduler::Planner& planner,
                                                 const scheduler::PlacementRequest& request) {
  ASSIGN_OR_RETURN(scheduler::ReplicaPlanRequest r, ReplicaPlanRequestFor(spec, request));
  auto alike = scheduler::PlanReplicas(planner, r);
  r.aligned = false;
  r.microbatch_paced = r.paced;
  r.paced = false;
  auto split = scheduler::PlanReplicas(planner, r);
  if (split.ok() && (!alike.ok() || split->tokens_per_second > alike->tokens_per_second)) {
    return split;
  }
  return alike;
}

}  // namespace longhaul::daemon
