// Parsing a distributed job file (job_spec.h): model::ParseJob reads the train-local schema,
// then each pipeline key is read by its parser, one row of kPipelineKeys per key: that table
// is the one place a key is named (PipelineJobKeys() lists it for model::ParseJob). The keys
// that constrain each other are checked together once those they name are read.
#include <algorithm>
#include <array>
#include <numeric>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "common/yaml_walker.h"
#include "compression/codec_spec.h"
#include "daemon/config_checks.h"
#include "daemon/job/spec/job_spec.h"
#include "model/tied_exchange.h"

namespace longhaul::daemon {

using Entry = YamlWalker::Entry;
using Fields = YamlWalker::Fields;

namespace {

// The `sync:` block (or its defaults when absent: `entry` null).
Status ParseSync(const YamlWalker& w, const Entry& /*root*/, const Entry* entry, JobSpec* spec) {
  fleet::SyncOptions& sync = spec->sync;
  bool codec_given = false, loss_given = false, lr_given = false, momentum_given = false;
  if (entry != nullptr) {
    ASSIGN_OR_RETURN(auto fields,
                     w.Map(*entry, {"mode", "every", "overlap", "outer", "codec", "on_site_loss",
                                    "reduce", "stagger", "fanout", "tracking", "warmup", "graph"}));
    if (auto it = fields.find("graph"); it != fields.end()) {
      ASSIGN_OR_RETURN(std::string graph, w.String(it->second));
      if (graph != "random" && graph != "exponential") {
        return w.Error(it->second, "sync.graph must be random or exponential, not '" + graph + "'");
      }
      sync.exponential_graph = graph == "exponential";
    }
    if (auto it = fields.find("warmup"); it != fields.end()) {
      ASSIGN_OR_RETURN(const int64_t warmup, w.Int(it->second, 0, 1000000000));
      sync.warmup = static_cast<int>(warmup);
    }
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
    if (auto it = fields.find("fanout"); it != fields.end()) {
      ASSIGN_OR_RETURN(const int64_t fanout, w.Int(it->second, 1, 1000));
      sync.fanout = static_cast<int>(fanout);
    }
    if (auto it = fields.find("tracking"); it != fields.end()) {
      ASSIGN_OR_RETURN(sync.tracking, w.Bool(it->second));
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
        ASSIGN_OR_RETURN(const double lr,
                         w.Double(o->second, fleet::kMinOuterLr, fleet::kMaxOuterLr));
        sync.outer.lr = static_cast<float>(lr);
        lr_given = true;
      }
      if (auto o = outer.find("momentum"); o != outer.end()) {
        ASSIGN_OR_RETURN(const double m, w.Double(o->second, 0, fleet::kMaxOuterMomentum));
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
  const bool gossip = sync.reduce == fleet::SyncReduce::kGossip;
  // Gossip sends fp32 values and weights of the coordinates it picks (all of them unless
  // topk:F), or over compressed links every coordinate's difference in a dense codec such as
  // q4, and mixes the parameters themselves: plain averaging unless an outer step is given
  // (each replica's own, before its mix).
  if (!codec_given) sync.codec = step || gossip ? "exact" : "q4";
  // The outer step the reduce, codec and cadence call for (fleet::DefaultOuterStep: plain
  // averaging for gossip, top-k and syncs every few steps, momentum 0.5 for sparser ones);
  // given values stay.
  const fleet::OuterOptions outer = fleet::DefaultOuterStep(sync);
  if (!lr_given) sync.outer.lr = outer.lr;
  if (!momentum_given) sync.outer.momentum = outer.momentum;
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
    // the scan goes one round further. The warm-up's syncs block: the scan starts after it.
    const int64_t period = sync.every / std::gcd(every, sync.every);
    const int64_t rounds = period + (sync.every + every - 1) / every;
    const int64_t first = std::max(0, sync.warmup) / every + 1;
    for (int64_t k = first; k < first + rounds && k * every < spec->job.steps; ++k) {
      int64_t into = 0;
      for (int p = 0; p < sync.stagger && (into < 1 || into >= sync.overlap); ++p) {
        const int64_t offset = static_cast<int64_t>(fleet::PhaseOffset(sync, p));
        into = k * every >= offset ? (k * every - offset) % sync.every : 0;
        // No sync started before this checkpoint, or the one before it blocked (warm-up).
        if (k * every - into < 1 || k * every - into <= sync.warmup) into = 0;
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

// The pipeline keys at the top level of the job file, with their paths.
Fields PipelineEntries(const Entry& root) {
  const absl::Span<const absl::string_view> keys = PipelineJobKeys();
  Fields out;
  for (auto it = root.value.begin(); it != root.value.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) {
      out.emplace(key, Entry{it->first, it->second, key});
    }
  }
  return out;
}

const Entry* Get(const Fields& fields, absl::string_view key) {
  auto it = fields.find(key);
  return it == fields.end() ? nullptr : &it->second;
}

// Where a problem about an absent key is reported (the file's start).
Entry At(const Entry* e) { return e != nullptr ? *e : Entry{}; }

Status ParseSites(const YamlWalker& w, const Entry& root, const Entry* sites, JobSpec* spec) {
  if (sites == nullptr) return w.Missing(root, "sites");
  if (!sites->value.IsSequence() || sites->value.size() == 0) {
    return w.Error(*sites, "expected a non-empty list of site names, in pipeline order");
  }
  std::set<std::string> seen;
  ASSIGN_OR_RETURN(const std::vector<Entry> items, w.List(*sites));
  for (const Entry& e : items) {
    ASSIGN_OR_RETURN(std::string site, w.String(e));
    if (!seen.insert(site).second) return w.Error(e, "site '" + site + "' is listed twice");
    spec->sites.push_back(site);
  }
  return absl::OkStatus();
}

Status ParseReplicas(const YamlWalker& w, const Entry& /*root*/, const Entry* e, JobSpec* spec) {
  if (e == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string v, w.String(*e));
  if (v == "auto") {
    spec->replicas = 0;  // the planner chooses (placement: planned, checked below)
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const int64_t n, w.Int(*e, 1, kMaxReplicas));
  spec->replicas = static_cast<int>(n);
  return absl::OkStatus();
}

// volunteers: site names, none listed twice or in `sites`; sync mode local (where sites join).
Status ParseVolunteers(const YamlWalker& w, const Entry& /*root*/, const Entry* e, JobSpec* spec) {
  if (e == nullptr || e->value.IsNull()) return absl::OkStatus();
  if (!e->value.IsSequence()) return w.Error(*e, "expected a list of site names");
  if (spec->sync.mode != fleet::SyncMode::kLocal) {
    return w.Error(*e,
                   "sites join a job with pipeline replicas in sync.mode local (this one runs "
                   "sync.mode step, where a replica more would change every step's batch)");
  }
  ASSIGN_OR_RETURN(const std::vector<Entry> items, w.List(*e));
  for (const Entry& item : items) {
    ASSIGN_OR_RETURN(std::string site, w.String(item));
    RETURN_IF_ERROR(w.Locate(config_internal::CheckSiteName(site), item));
    if (std::find(spec->sites.begin(), spec->sites.end(), site) != spec->sites.end()) {
      return w.Error(item, "site '" + site + "' is one of the job's sites already");
    }
    if (std::find(spec->volunteers.begin(), spec->volunteers.end(), site) !=
        spec->volunteers.end()) {
      return w.Error(item, "site '" + site + "' is listed twice");
    }
    spec->volunteers.push_back(std::move(site));
  }
  return absl::OkStatus();
}

// replica_microbatches: paced, or one count per replica.
Status ParseReplicaMicrobatches(const YamlWalker& w, const Entry& /*root*/, const Entry* e,
                                JobSpec* spec) {
  if (e == nullptr) return absl::OkStatus();
  if (e->value.IsScalar() && e->value.Scalar() == "paced") {
    if (spec->replicas == 1) {
      return w.Error(*e, "paced needs replicas: a number of 2 or more, or auto");
    }
    spec->paced = true;
    return absl::OkStatus();
  }
  if (spec->replicas < 2) {
    return w.Error(*e, "needs replicas: a number of 2 or more (one count per replica)");
  }
  if (!e->value.IsSequence() || e->value.size() != static_cast<size_t>(spec->replicas)) {
    return w.Error(*e, "expected a list of " + std::to_string(spec->replicas) +
                           " microbatch counts, one per replica, or paced");
  }
  ASSIGN_OR_RETURN(const std::vector<Entry> items, w.List(*e));
  for (const Entry& item : items) {
    ASSIGN_OR_RETURN(const int64_t m, w.Int(item, 1, kMaxReplicaMicrobatches));
    spec->replica_microbatches.push_back(static_cast<int>(m));
  }
  return absl::OkStatus();
}

// replica_stages: one stage count per replica, summing to the listed sites.
Status ParseReplicaStages(const YamlWalker& w, const Entry& /*root*/, const Entry* e,
                          JobSpec* spec) {
  if (e == nullptr) return absl::OkStatus();
  if (spec->replicas < 2) {
    return w.Error(*e, "needs replicas: a number of 2 or more (one count per replica)");
  }
  if (!e->value.IsSequence() || e->value.size() != static_cast<size_t>(spec->replicas)) {
    return w.Error(*e, "expected a list of " + std::to_string(spec->replicas) +
                           " stage counts, one per replica");
  }
  int64_t total = 0;
  ASSIGN_OR_RETURN(const std::vector<Entry> items, w.List(*e));
  for (const Entry& item : items) {
    ASSIGN_OR_RETURN(const int64_t n, w.Int(item, 1, spec->job.model.num_layers));
    spec->replica_stages.push_back(static_cast<int>(n));
    total += n;
  }
  if (total != static_cast<int64_t>(spec->sites.size())) {
    return w.Error(*e, std::to_string(total) + " stages in all, but " +
                           std::to_string(spec->sites.size()) +
                           " sites are listed (one site per stage, replica by replica)");
  }
  return absl::OkStatus();
}

Status ParseInFlight(const YamlWalker& w, const Entry& /*root*/, const Entry* e, JobSpec* spec) {
  if (e == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string v, w.String(*e));
  int64_t parsed = 0;
  if (v == "auto") {
    spec->extra_in_flight = JobSpec::kAutoInFlight;
  } else if (!absl::SimpleAtoi(v, &parsed)) {
    return w.Error(*e,
                   "expected auto or a number of microbatches (0: plain 1F1B), got '" + v + "'");
  } else {
    // More than M is the same as M: a stage never holds more than its step's microbatches.
    ASSIGN_OR_RETURN(const int64_t n, w.Int(*e, 0, kMaxReplicaMicrobatches));
    spec->extra_in_flight = static_cast<int>(n);
  }
  return absl::OkStatus();
}

// A two-way key: `yes` (or true) sets *out, `no` (or false, for replan) clears it.
Status ParseChoice(const YamlWalker& w, const Entry* e, const std::string& yes,
                   const std::string& no, bool booleans, bool* out) {
  if (e == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string v, w.String(*e));
  if (v == yes || (booleans && v == "true")) {
    *out = true;
  } else if (v == no || (booleans && v == "false")) {
    *out = false;
  } else {
    return w.Error(*e, "expected " + yes + " or " + no + ", got '" + v + "'");
  }
  return absl::OkStatus();
}

// The keys that constrain each other: sync against replicas, and what each placement allows.
Status CheckTogether(const YamlWalker& w, const Fields& f, JobSpec* spec) {
  const Entry sites = At(Get(f, "sites")), replicas = At(Get(f, "replicas")),
              sync = At(Get(f, "sync")), mb = At(Get(f, "replica_microbatches"));
  const Entry* rs = Get(f, "replica_stages");
  if (spec->replicas == 1 && spec->sync.overlap > 0) {
    return w.Error(sync, "sync.overlap needs replicas: a number of 2 or more, or auto");
  }
  if (spec->replicas == 1 && spec->sync.stagger > 1) {
    return w.Error(sync, "sync.stagger needs replicas: a number of 2 or more, or auto");
  }
  if (spec->planned) {
    // The listed sites are candidates: the planner picks the replicas among them. With token
    // files it keeps the listed order (the data is on the first site) and every site.
    if (spec->job.data.train != model::kBuiltinData &&
        static_cast<int>(spec->sites.size()) > spec->job.model.num_layers) {
      return w.Error(sites, "more sites (" + std::to_string(spec->sites.size()) +
                                ") than layers (" + std::to_string(spec->job.model.num_layers) +
                                "): with token files the planner keeps every listed site");
    }
    if (!spec->replica_microbatches.empty()) {
      return w.Error(mb,
                     "a list needs placement: even (the planner decides which sites form which "
                     "replica, so a count per replica cannot be given ahead of the plan); with "
                     "placement: planned say paced");
    }
    if (spec->replicas != 1 && spec->job.data.train != model::kBuiltinData) {
      return w.Error(replicas,
                     "the planner places replicas only for data: {train: builtin} (token files "
                     "live on the first listed site, and every replica's first stage reads its "
                     "shard); list the sites replica by replica with placement: even");
    }
    if (rs != nullptr) {
      return w.Error(*rs,
                     "needs placement: even (with placement: planned the planner splits each "
                     "replica)");
    }
  } else {
    if (spec->paced) {
      return w.Error(mb,
                     "paced needs placement: planned (the planner paces the replicas it "
                     "places); with placement: even give one count per replica");
    }
    if (spec->replicas == 0) {
      return w.Error(replicas,
                     "auto needs placement: planned (the planner chooses how many replicas and "
                     "where); with placement: even give a number");
    }
    if (spec->sync.reduce == fleet::SyncReduce::kAuto) {
      return w.Error(sync,
                     "sync.reduce: auto needs placement: planned (the planner prices gather "
                     "and ring on the measured links); with placement: even give gather or ring");
    }
    if (rs == nullptr && spec->sites.size() % static_cast<size_t>(spec->replicas) != 0) {
      return w.Error(replicas, std::to_string(spec->sites.size()) + " sites do not form " +
                                   std::to_string(spec->replicas) +
                                   " replicas of the same length (replica_stages gives "
                                   "each replica its own count)");
    }
    if (rs == nullptr && spec->stages() > spec->job.model.num_layers) {
      return w.Error(sites, "more stages per replica (" + std::to_string(spec->stages()) +
                                ") than layers (" + std::to_string(spec->job.model.num_layers) +
                                ")");
    }
  }
  if (spec->replicas != 1) spec->replan = false;  // layers would have to move in every replica
  return absl::OkStatus();
}

// replan: on (or true) | off (or false).
Status ParseReplan(const YamlWalker& w, const Entry& /*root*/, const Entry* e, JobSpec* spec) {
  return ParseChoice(w, e, "on", "off", true, &spec->replan);
}

// sharding: auto | replicate | zero1 | zero2 | zero3.
Status ParseSharding(const YamlWalker& w, const Entry& /*root*/, const Entry* e, JobSpec* spec) {
  if (e == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string v, w.String(*e));
  if (v == "auto") return absl::OkStatus();
  for (int k = 0; k < model::kNumShardModes; ++k) {
    if (v == model::ShardModeName(model::ShardMode(k))) {
      spec->sharding = model::ShardMode(k);
      return absl::OkStatus();
    }
  }
  return w.Error(*e, "expected auto, replicate, zero1, zero2 or zero3, got '" + v + "'");
}

// placement: planned | even; then the keys read before it, which constrain each other and
// what each placement allows, are checked together.
Status ParsePlacement(const YamlWalker& w, const Entry& root, const Entry* e, JobSpec* spec) {
  RETURN_IF_ERROR(ParseChoice(w, e, "planned", "even", false, &spec->planned));
  return CheckTogether(w, PipelineEntries(root), spec);
}

// compression: {mode, codec, floor, tied, activations: {...}, gradients: {...}}.
Status ParseCompression(const YamlWalker& w, const Entry& /*root*/, const Entry* e, JobSpec* spec) {
  if (e == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto fields,
                   w.Map(*e, {"mode", "codec", "floor", "tied", "activations", "gradients"}));
  if (auto it = fields.find("mode"); it != fields.end()) {
    ASSIGN_OR_RETURN(std::string mode, w.String(it->second));
    if (mode == "off") {
      spec->compression = CompressionMode::kOff;
    } else if (mode == "fixed") {
      spec->compression = CompressionMode::kFixed;
    } else if (mode == "adaptive") {
      spec->compression = CompressionMode::kAdaptive;
    } else {
      return w.Error(it->second, "expected off, fixed or adaptive, got '" + mode + "'");
    }
  }
  if (auto it = fields.find("codec"); it != fields.end()) {
    ASSIGN_OR_RETURN(spec->codec, w.String(it->second));
  }
  if (auto it = fields.find("floor"); it != fields.end()) {
    ASSIGN_OR_RETURN(spec->floor, w.String(it->second));
    spec->floor_given = true;
  }
  for (const char* direction : {"activations", "gradients"}) {
    auto it = fields.find(direction);
    if (it == fields.end()) continue;
    JobSpec::DirectionCodecs& d =
        std::string(direction) == "gradients" ? spec->gradients : spec->activations;
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
    const Status fits = CheckDirectionCodecs(*spec);
    if (!fits.ok()) return w.Error(*e, fits.message());
  }
  if (auto it = fields.find("tied"); it != fields.end()) {
    ASSIGN_OR_RETURN(spec->tied_codec, w.String(it->second));
    if (auto c = model::TiedGradCodec::Create(spec->tied_codec); !c.ok()) {
      return w.Error(it->second, std::string(c.status().message()));
    }
  }
  return absl::OkStatus();
}

// A top-level pipeline key: its name in the job file and the function that reads it into the
// JobSpec, given the key's entry (null when the file leaves the key out: the parser fills in
// the default or reports the key missing) and the file's top level `root`.
struct PipelineKey {
  absl::string_view name;
  Status (*parse)(const YamlWalker& w, const Entry& root, const Entry* e, JobSpec* spec);
};

// The pipeline keys, in the order they are read: a parser may read what the rows above it
// filled in (replica_stages: replicas and sites; placement checks them all together). A new
// key is a row here and the JobSpec field its parser fills.
constexpr PipelineKey kPipelineKeys[] = {
    {"sites", ParseSites},
    {"replicas", ParseReplicas},
    {"sync", ParseSync},
    {"volunteers", ParseVolunteers},
    {"replica_microbatches", ParseReplicaMicrobatches},
    {"replica_stages", ParseReplicaStages},
    {"extra_in_flight", ParseInFlight},
    {"replan", ParseReplan},
    {"sharding", ParseSharding},
    {"placement", ParsePlacement},
    {"compression", ParseCompression},
};

constexpr auto kPipelineKeyNames = [] {
  std::array<absl::string_view, std::size(kPipelineKeys)> names;
  for (size_t i = 0; i < names.size(); ++i) names[i] = kPipelineKeys[i].name;
  return names;
}();

}  // namespace

absl::Span<const absl::string_view> PipelineJobKeys() { return kPipelineKeyNames; }

StatusOr<JobSpec> ParseJobSpec(const std::string& yaml, const std::string& source,
                               const std::string& base_dir) {
  JobSpec spec;
  spec.yaml = yaml;
  ASSIGN_OR_RETURN(spec.job, model::ParseJob(yaml, source, base_dir, PipelineJobKeys()));
  YamlWalker w(source);
  ASSIGN_OR_RETURN(const Entry root, w.Root(yaml));
  const Fields f = PipelineEntries(root);  // model::ParseJob has checked the top level
  for (const PipelineKey& key : kPipelineKeys) {
    RETURN_IF_ERROR(key.parse(w, root, Get(f, key.name), &spec));
  }
  return spec;
}

}  // namespace longhaul::daemon
