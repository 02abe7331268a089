// Parsing and validating a distributed job file (job_spec.h): the train-local schema plus
// sites, placement, compression and re-planning.
#include "daemon/job/job_spec.h"

#include <numeric>
#include <set>

#include "absl/strings/numbers.h"
#include "common/yaml_walker.h"
#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "compression/controller.h"
#include "model/tied_exchange.h"

namespace longhaul::daemon {

namespace {

// The `sync:` block (or its defaults when absent: `entry` null).
Status ParseSync(const YamlWalker& w, const YamlWalker::Entry* entry, JobSpec* spec) {
  fleet::SyncOptions& sync = spec->sync;
  bool codec_given = false, loss_given = false, lr_given = false, momentum_given = false;
  if (entry != nullptr) {
    ASSIGN_OR_RETURN(auto fields, w.Map(*entry, {"mode", "every", "overlap", "outer", "codec",
                                                 "on_site_loss", "reduce", "stagger"}));
    if (auto it = fields.find("stagger"); it != fields.end()) {
      ASSIGN_OR_RETURN(const int64_t stagger, w.Int(it->second, 1, 1000000));
      if (stagger > spec->job.model.num_layers) {
        return w.Error(it->second, "sync.stagger " + std::to_string(stagger) +
                                       " is more phases than the model's " +
                                       std::to_string(spec->job.model.num_layers) +
                                       " layers (each phase syncs layers l with l mod stagger "
                                       "equal to it)");
      }
      sync.stagger = static_cast<int>(stagger);
    }
    if (auto it = fields.find("reduce"); it != fields.end()) {
      ASSIGN_OR_RETURN(std::string text, w.String(it->second));
      auto reduce = fleet::ParseSyncReduce(text);
      if (!reduce.ok()) return w.Error(it->second, reduce.status().message());
      sync.reduce = *reduce;
    }
    if (auto it = fields.find("on_site_loss"); it != fields.end()) {
      ASSIGN_OR_RETURN(std::string text, w.String(it->second));
      auto loss = fleet::ParseSiteLoss(text);
      if (!loss.ok()) return w.Error(it->second, loss.status().message());
      sync.on_site_loss = *loss;
      loss_given = true;
    }
    if (auto it = fields.find("mode"); it != fields.end()) {
      ASSIGN_OR_RETURN(std::string mode, w.String(it->second));
      auto m = fleet::ParseSyncMode(mode);
      if (!m.ok()) return w.Error(it->second, m.status().message());
      sync.mode = *m;
    }
    if (auto it = fields.find("every"); it != fields.end()) {
      ASSIGN_OR_RETURN(const int64_t every, w.Int(it->second, 1, 1000000));
      sync.every = static_cast<int>(every);
    }
    if (auto it = fields.find("overlap"); it != fields.end()) {
      ASSIGN_OR_RETURN(const int64_t overlap, w.Int(it->second, 0, 999999));
      sync.overlap = static_cast<int>(overlap);
    }
    if (auto it = fields.find("outer"); it != fields.end()) {
      ASSIGN_OR_RETURN(auto outer, w.Map(it->second, {"lr", "momentum", "nesterov"}));
      if (auto o = outer.find("lr"); o != outer.end()) {
        ASSIGN_OR_RETURN(const double lr, w.Double(o->second, 1e-9, 100));
        sync.outer.lr = static_cast<float>(lr);
        lr_given = true;
      }
      if (auto o = outer.find("momentum"); o != outer.end()) {
        ASSIGN_OR_RETURN(const double m, w.Double(o->second, 0, 0.999999));
        sync.outer.momentum = static_cast<float>(m);
        momentum_given = true;
      }
      if (auto o = outer.find("nesterov"); o != outer.end()) {
        ASSIGN_OR_RETURN(std::string v, w.String(o->second));
        if (v != "true" && v != "false") {
          return w.Error(o->second, "expected true or false, got '" + v + "'");
        }
        sync.outer.nesterov = v == "true";
      }
    }
    if (auto it = fields.find("codec"); it != fields.end()) {
      ASSIGN_OR_RETURN(sync.codec, w.String(it->second));
      codec_given = true;
      if (sync.codec != "adaptive") {  // adaptive: chosen per sync (sync_codec.h)
        const auto spec_or = fleet::FixedSyncCodec(sync.codec);
        if (!spec_or.ok()) return w.Error(it->second, spec_or.status().message());
      }
    }
  }
  const bool step = sync.mode == fleet::SyncMode::kStep;
  if (!codec_given) sync.codec = step ? "exact" : "q4";
  // A top-k codec's error feedback carries what a sync leaves out to the next, as momentum
  // would: its outer step defaults to plain averaging (the replica study in BENCHMARKS.md:
  // with the Nesterov default it does not train). Given values stay.
  if (sync.codec.rfind("topk:", 0) == 0) {
    if (!lr_given) sync.outer.lr = 1.0f;
    if (!momentum_given) sync.outer.momentum = 0.0f;
  }
  // Dropping a replica restarts the others from the committed step, and it rejoins at a later
  // one: without checkpoints until the end (checkpoint.every 0) both would start over.
  const bool checkpoints = spec->job.checkpoint.every > 0;
  if (!loss_given) {
    sync.on_site_loss = step || !checkpoints ? fleet::SiteLoss::kWait : fleet::SiteLoss::kDrop;
  } else if (sync.on_site_loss == fleet::SiteLoss::kDrop && !checkpoints) {
    return w.Error(*entry,
                   "sync.on_site_loss: drop needs checkpoint.every > 0 (the replicas "
                   "left restart from the last committed checkpoint)");
  }
  const Status s = fleet::ValidateSyncOptions(sync);
  if (!s.ok() && entry != nullptr) return w.Error(*entry, s.message());
  RETURN_IF_ERROR(s);
  // A checkpoint is the state between steps with no sync in flight, or right before one starts
  // (the stage resuming there starts it again): none may fall inside a streaming sync (of any
  // phase, when staggered).
  const int every = spec->job.checkpoint.every;
  if (sync.overlap > 1 && every > 0) {
    // The checkpoints' places in the round repeat every `period` checkpoints; the first round
    // (before every phase has started a sync) is skipped by each phase's own test below, so
    // the scan goes one round further.
    const int64_t period = sync.every / std::gcd(every, sync.every);
    const int64_t rounds = period + (sync.every + every - 1) / every;
    for (int64_t k = 1; k <= rounds && k * every < spec->job.steps; ++k) {
      int64_t into = 0;
      for (int p = 0; p < sync.stagger && (into < 1 || into >= sync.overlap); ++p) {
        const int64_t offset = static_cast<int64_t>(fleet::PhaseOffset(sync, p));
        into = k * every >= offset ? (k * every - offset) % sync.every : 0;
        if (k * every - into < 1) into = 0;  // no sync started before this checkpoint
      }
      if (into >= 1 && into < sync.overlap) {
        return w.Error(*entry, "checkpoint step " + std::to_string(k * every) + " (every " +
                                   std::to_string(every) +
                                   ") falls inside the streaming sync "
                                   "started at step " +
                                   std::to_string(k * every - into) + " (sync.every " +
                                   std::to_string(sync.every) + ", overlap " +
                                   std::to_string(sync.overlap) +
                                   "): make checkpoint.every a multiple of sync.every, or the "
                                   "overlap at most " +
                                   std::to_string(into));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

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

StatusOr<JobSpec> ParseJobSpec(const std::string& yaml, const std::string& source,
                               const std::string& base_dir) {
  JobSpec spec;
  spec.yaml = yaml;
  ASSIGN_OR_RETURN(spec.job, model::ParseJob(yaml, source, base_dir));
  YamlWalker w(source);
  ASSIGN_OR_RETURN(auto root, w.Root(yaml));
  const auto& node = root.value;
  // model::ParseJob has checked the top level; read the pipeline keys.
  YamlWalker::Entry sites_entry{}, comp_entry{}, replan_entry{}, placement_entry{},
      replicas_entry{}, sync_entry{}, mb_entry{}, rs_entry{}, flight_entry{};
  bool have_sites = false, have_comp = false, have_replan = false, have_placement = false,
       have_replicas = false, have_sync = false, have_mb = false, have_rs = false,
       have_flight = false;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (key == "sites") {
      sites_entry = {it->first, it->second, "sites"};
      have_sites = true;
    } else if (key == "compression") {
      comp_entry = {it->first, it->second, "compression"};
      have_comp = true;
    } else if (key == "replan") {
      replan_entry = {it->first, it->second, "replan"};
      have_replan = true;
    } else if (key == "placement") {
      placement_entry = {it->first, it->second, "placement"};
      have_placement = true;
    } else if (key == "replicas") {
      replicas_entry = {it->first, it->second, "replicas"};
      have_replicas = true;
    } else if (key == "sync") {
      sync_entry = {it->first, it->second, "sync"};
      have_sync = true;
    } else if (key == "replica_microbatches") {
      mb_entry = {it->first, it->second, "replica_microbatches"};
      have_mb = true;
    } else if (key == "replica_stages") {
      rs_entry = {it->first, it->second, "replica_stages"};
      have_rs = true;
    } else if (key == "extra_in_flight") {
      flight_entry = {it->first, it->second, "extra_in_flight"};
      have_flight = true;
    }
  }
  if (!have_sites) return w.Missing(root, "sites");
  if (!sites_entry.value.IsSequence() || sites_entry.value.size() == 0) {
    return w.Error(sites_entry, "expected a non-empty list of site names, in pipeline order");
  }
  std::set<std::string> seen;
  for (size_t i = 0; i < sites_entry.value.size(); ++i) {
    YamlWalker::Entry e{sites_entry.key, sites_entry.value[i], "sites[" + std::to_string(i) + "]"};
    ASSIGN_OR_RETURN(std::string site, w.String(e));
    if (!seen.insert(site).second) return w.Error(e, "site '" + site + "' is listed twice");
    spec.sites.push_back(site);
  }
  if (have_replicas) {
    ASSIGN_OR_RETURN(std::string v, w.String(replicas_entry));
    if (v == "auto") {
      spec.replicas = 0;  // the planner chooses (placement: planned, checked below)
    } else {
      ASSIGN_OR_RETURN(const int64_t n, w.Int(replicas_entry, 1, kMaxReplicas));
      spec.replicas = static_cast<int>(n);
    }
  }
  RETURN_IF_ERROR(ParseSync(w, have_sync ? &sync_entry : nullptr, &spec));
  if (spec.replicas == 1 && spec.sync.overlap > 0) {
    return w.Error(sync_entry, "sync.overlap needs replicas: a number of 2 or more, or auto");
  }
  if (spec.replicas == 1 && spec.sync.stagger > 1) {
    return w.Error(sync_entry, "sync.stagger needs replicas: a number of 2 or more, or auto");
  }
  const bool paced_mb = have_mb && mb_entry.value.IsScalar() && mb_entry.value.Scalar() == "paced";
  if (paced_mb) {
    if (spec.replicas == 1) {
      return w.Error(mb_entry, "paced needs replicas: a number of 2 or more, or auto");
    }
    spec.paced = true;
  } else if (have_mb) {
    if (spec.replicas < 2) {
      return w.Error(mb_entry, "needs replicas: a number of 2 or more (one count per replica)");
    }
    if (!mb_entry.value.IsSequence() ||
        mb_entry.value.size() != static_cast<size_t>(spec.replicas)) {
      return w.Error(mb_entry, "expected a list of " + std::to_string(spec.replicas) +
                                   " microbatch counts, one per replica, or paced");
    }
    for (size_t i = 0; i < mb_entry.value.size(); ++i) {
      YamlWalker::Entry e{mb_entry.key, mb_entry.value[i],
                          "replica_microbatches[" + std::to_string(i) + "]"};
      ASSIGN_OR_RETURN(const int64_t m, w.Int(e, 1, kMaxReplicaMicrobatches));
      spec.replica_microbatches.push_back(static_cast<int>(m));
    }
  }
  if (have_rs) {
    if (spec.replicas < 2) {
      return w.Error(rs_entry, "needs replicas: a number of 2 or more (one count per replica)");
    }
    if (!rs_entry.value.IsSequence() ||
        rs_entry.value.size() != static_cast<size_t>(spec.replicas)) {
      return w.Error(rs_entry, "expected a list of " + std::to_string(spec.replicas) +
                                   " stage counts, one per replica");
    }
    int64_t total = 0;
    for (size_t i = 0; i < rs_entry.value.size(); ++i) {
      YamlWalker::Entry e{rs_entry.key, rs_entry.value[i],
                          "replica_stages[" + std::to_string(i) + "]"};
      ASSIGN_OR_RETURN(const int64_t n, w.Int(e, 1, spec.job.model.num_layers));
      spec.replica_stages.push_back(static_cast<int>(n));
      total += n;
    }
    if (total != static_cast<int64_t>(spec.sites.size())) {
      return w.Error(rs_entry, std::to_string(total) + " stages in all, but " +
                                   std::to_string(spec.sites.size()) +
                                   " sites are listed (one site per stage, replica by replica)");
    }
  }
  if (have_flight) {
    ASSIGN_OR_RETURN(std::string v, w.String(flight_entry));
    int64_t parsed = 0;
    if (v == "auto") {
      spec.extra_in_flight = JobSpec::kAutoInFlight;
    } else if (!absl::SimpleAtoi(v, &parsed)) {
      return w.Error(flight_entry,
                     "expected auto or a number of microbatches (0: plain 1F1B), got '" + v + "'");
    } else {
      // More than M is the same as M: a stage never holds more than its step's microbatches.
      ASSIGN_OR_RETURN(const int64_t n, w.Int(flight_entry, 0, kMaxReplicaMicrobatches));
      spec.extra_in_flight = static_cast<int>(n);
    }
  }
  if (have_replan) {
    ASSIGN_OR_RETURN(std::string v, w.String(replan_entry));
    if (v == "on" || v == "true") {
      spec.replan = true;
    } else if (v == "off" || v == "false") {
      spec.replan = false;
    } else {
      return w.Error(replan_entry, "expected on or off, got '" + v + "'");
    }
  }
  if (have_placement) {
    ASSIGN_OR_RETURN(std::string v, w.String(placement_entry));
    if (v == "planned") {
      spec.planned = true;
    } else if (v == "even") {
      spec.planned = false;
    } else {
      return w.Error(placement_entry, "expected planned or even, got '" + v + "'");
    }
  }
  if (spec.planned) {
    // The listed sites are candidates: the planner picks the replicas among them. With token
    // files it keeps the listed order (the data is on the first site) and every site.
    if (spec.job.data.train != model::kBuiltinData &&
        static_cast<int>(spec.sites.size()) > spec.job.model.num_layers) {
      return w.Error(sites_entry, "more sites (" + std::to_string(spec.sites.size()) +
                                      ") than layers (" +
                                      std::to_string(spec.job.model.num_layers) +
                                      "): with token files the planner keeps every listed site");
    }
    if (!spec.replica_microbatches.empty()) {
      return w.Error(mb_entry,
                     "a list needs placement: even (the planner decides which sites form which "
                     "replica, so a count per replica cannot be given ahead of the plan); with "
                     "placement: planned say paced");
    }
    if (spec.replicas != 1 && spec.job.data.train != model::kBuiltinData) {
      return w.Error(replicas_entry,
                     "the planner places replicas only for data: {train: builtin} (token files "
                     "live on the first listed site, and every replica's first stage reads its "
                     "shard); list the sites replica by replica with placement: even");
    }
    if (have_rs) {
      return w.Error(rs_entry,
                     "needs placement: even (with placement: planned the planner splits each "
                     "replica)");
    }
  } else {
    if (spec.paced) {
      return w.Error(mb_entry,
                     "paced needs placement: planned (the planner paces the replicas it "
                     "places); with placement: even give one count per replica");
    }
    if (spec.replicas == 0) {
      return w.Error(replicas_entry,
                     "auto needs placement: planned (the planner chooses how many replicas and "
                     "where); with placement: even give a number");
    }
    if (spec.sync.reduce == fleet::SyncReduce::kAuto) {
      return w.Error(sync_entry,
                     "sync.reduce: auto needs placement: planned (the planner prices gather "
                     "and ring on the measured links); with placement: even give gather or ring");
    }
    if (!have_rs && spec.sites.size() % static_cast<size_t>(spec.replicas) != 0) {
      return w.Error(replicas_entry, std::to_string(spec.sites.size()) + " sites do not form " +
                                         std::to_string(spec.replicas) +
                                         " replicas of the same length (replica_stages gives "
                                         "each replica its own count)");
    }
    if (!have_rs && spec.stages() > spec.job.model.num_layers) {
      return w.Error(sites_entry, "more stages per replica (" + std::to_string(spec.stages()) +
                                      ") than layers (" +
                                      std::to_string(spec.job.model.num_layers) + ")");
    }
  }
  if (spec.replicas != 1) spec.replan = false;  // layers would have to move in every replica
  if (have_comp) {
    ASSIGN_OR_RETURN(auto fields, w.Map(comp_entry, {"mode", "codec", "floor", "tied",
                                                     "activations", "gradients"}));
    if (auto it = fields.find("mode"); it != fields.end()) {
      ASSIGN_OR_RETURN(std::string mode, w.String(it->second));
      if (mode == "off") {
        spec.compression = CompressionMode::kOff;
      } else if (mode == "fixed") {
        spec.compression = CompressionMode::kFixed;
      } else if (mode == "adaptive") {
        spec.compression = CompressionMode::kAdaptive;
      } else {
        return w.Error(it->second, "expected off, fixed or adaptive, got '" + mode + "'");
      }
    }
    if (auto it = fields.find("codec"); it != fields.end()) {
      ASSIGN_OR_RETURN(spec.codec, w.String(it->second));
    }
    if (auto it = fields.find("floor"); it != fields.end()) {
      ASSIGN_OR_RETURN(spec.floor, w.String(it->second));
      spec.floor_given = true;
    }
    for (const char* direction : {"activations", "gradients"}) {
      auto it = fields.find(direction);
      if (it == fields.end()) continue;
      JobSpec::DirectionCodecs& d =
          std::string(direction) == "gradients" ? spec.gradients : spec.activations;
      ASSIGN_OR_RETURN(auto sub, w.Map(it->second, {"ladder", "codec", "floor"}));
      if (auto l = sub.find("ladder"); l != sub.end()) {
        if (!l->second.value.IsSequence() || l->second.value.size() == 0) {
          return w.Error(l->second, "expected a non-empty list of codecs, least lossy first");
        }
        for (const auto& rung : l->second.value) {
          const std::string name = rung.IsScalar() ? rung.as<std::string>() : "";
          auto parsed = compression::ParseCodecSpec(name);
          if (!parsed.ok()) return w.Error(l->second, parsed.status().message());
          d.ladder.push_back(name);
        }
      }
      if (auto c = sub.find("codec"); c != sub.end()) {
        ASSIGN_OR_RETURN(d.codec, w.String(c->second));
      }
      if (auto f = sub.find("floor"); f != sub.end()) {
        ASSIGN_OR_RETURN(d.floor, w.String(f->second));
      }
    }
    if (fields.count("activations") + fields.count("gradients") > 0) {
      const Status fits = CheckDirectionCodecs(spec);
      if (!fits.ok()) return w.Error(comp_entry, fits.message());
    }
    if (auto it = fields.find("tied"); it != fields.end()) {
      ASSIGN_OR_RETURN(spec.tied_codec, w.String(it->second));
      if (auto c = model::TiedGradCodec::Create(spec.tied_codec); !c.ok()) {
        return w.Error(it->second, std::string(c.status().message()));
      }
    }
  }
  return spec;
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
  r.sync.reduce = spec.sync.reduce == fleet::SyncReduce::kRing ? scheduler::SyncReduceCost::kRing
                  : spec.sync.reduce == fleet::SyncReduce::kAuto
                      ? scheduler::SyncReduceCost::kCheaper
                      : scheduler::SyncReduceCost::kGather;
  // adaptive is priced at its floor, the codec it falls to on a slow link.
  ASSIGN_OR_RETURN(const compression::CodecSpec codec,
                   fleet::FixedSyncCodec(spec.sync.codec == "adaptive" ? "q4" : spec.sync.codec));
  constexpr uint64_t kValues = uint64_t{1} << 20;
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
