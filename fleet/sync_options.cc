// Parsing and validating the sync options (see sync_options.h).
#include "fleet/sync_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace longhaul::fleet {

const char* SyncModeName(SyncMode mode) { return mode == SyncMode::kStep ? "step" : "local"; }

StatusOr<SyncMode> ParseSyncMode(std::string_view text) {
  if (text == "step") return SyncMode::kStep;
  if (text == "local") return SyncMode::kLocal;
  return absl::InvalidArgumentError(
      absl::StrCat("sync.mode must be step or local, not '", std::string(text), "'"));
}

const char* SyncReduceName(SyncReduce reduce) {
  switch (reduce) {
    case SyncReduce::kRing:
      return "ring";
    case SyncReduce::kAuto:
      return "auto";
    case SyncReduce::kGossip:
      return "gossip";
    case SyncReduce::kGather:
      break;
  }
  return "gather";
}

StatusOr<SyncReduce> ParseSyncReduce(std::string_view text) {
  if (text == "gather") return SyncReduce::kGather;
  if (text == "ring") return SyncReduce::kRing;
  if (text == "auto") return SyncReduce::kAuto;
  if (text == "gossip") return SyncReduce::kGossip;
  return absl::InvalidArgumentError(absl::StrCat(
      "sync.reduce must be gather, ring, auto or gossip, not '", std::string(text), "'"));
}

const char* SiteLossName(SiteLoss loss) { return loss == SiteLoss::kDrop ? "drop" : "wait"; }

StatusOr<SiteLoss> ParseSiteLoss(std::string_view text) {
  if (text == "drop") return SiteLoss::kDrop;
  if (text == "wait") return SiteLoss::kWait;
  return absl::InvalidArgumentError(
      absl::StrCat("sync.on_site_loss must be drop or wait, not '", std::string(text), "'"));
}

StatusOr<compression::CodecSpec> FixedSyncCodec(std::string_view codec) {
  if (codec == "exact") return compression::ParseCodecSpec("fp32");
  if (codec == "adaptive") {
    return absl::InvalidArgumentError("sync codec 'adaptive' is chosen at run time, not fixed");
  }
  auto spec = compression::ParseCodecSpec(codec);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sync.codec '", std::string(codec),
                                                   "': ", std::string(spec.status().message())));
  }
  return spec;
}

uint64_t PhaseOffset(const SyncOptions& o, int phase) {
  const uint64_t every = static_cast<uint64_t>(std::max(1, o.every));
  return static_cast<uint64_t>(phase) * every / static_cast<uint64_t>(std::max(1, o.stagger));
}

namespace {

// The phase whose sync step `done` is (>= 1), or kEveryPhase when none is.
int PhaseAt(const SyncOptions& o, uint64_t done) {
  const uint64_t every = static_cast<uint64_t>(std::max(1, o.every));
  const int stagger = std::max(1, o.stagger);
  for (int p = 0; p < stagger; ++p) {
    if (done % every == PhaseOffset(o, p)) return p;
  }
  return kEveryPhase;
}

}  // namespace

LocalSyncAction LocalSyncAt(const SyncOptions& o, uint64_t done, uint64_t total) {
  LocalSyncAction a;
  const uint64_t every = static_cast<uint64_t>(std::max(1, o.every));
  const uint64_t overlap = static_cast<uint64_t>(std::max(0, o.overlap));
  if (done == 0) return a;
  const uint64_t warmup = static_cast<uint64_t>(std::max(0, o.warmup));
  if (done <= warmup) {
    a.blocking = true;
    return a;
  }
  const int phase = PhaseAt(o, done);
  if (overlap == 0) {
    a.blocking = phase != kEveryPhase || done == total;
    a.phase = done == total || o.stagger <= 1 ? kEveryPhase : phase;
    return a;
  }
  // The one sync that can be in flight (overlap < every / stagger, the closest two phases'
  // distance): the last sync step before `done`, if it started within `overlap` steps or
  // this is the last step. A sync step within the warm-up blocked.
  uint64_t last_start = 0;
  int last_phase = 0;
  for (int p = 0; p < std::max(1, o.stagger); ++p) {
    const uint64_t offset = PhaseOffset(o, p);
    if (done - 1 < offset) continue;
    const uint64_t s = offset + (done - 1 - offset) / every * every;
    if (s > last_start) {
      last_start = s;
      last_phase = p;
    }
  }
  if (last_start > warmup && last_start < total &&
      (last_start + overlap == done || (done == total && last_start + overlap > done))) {
    a.finish = true;
    a.started = last_start;
    a.finish_phase = o.stagger > 1 ? last_phase : kEveryPhase;
  }
  a.start = phase != kEveryPhase && done < total;
  a.phase = a.start && o.stagger > 1 ? phase : kEveryPhase;
  a.blocking = done == total;
  return a;
}

OuterOptions OuterStepAt(const SyncOptions& o, uint64_t done) {
  return done <= static_cast<uint64_t>(std::max(0, o.warmup)) ? kPlainAveraging : o.outer;
}

OuterOptions DefaultOuterStep(const SyncOptions& o) {
  const bool topk = o.codec.rfind("topk:", 0) == 0;
  if (o.reduce == SyncReduce::kGossip || topk || o.every < kOuterMomentumFromEvery) {
    return kPlainAveraging;
  }
  return kCadenceMomentum;
}

uint64_t SyncsBefore(const SyncOptions& o, uint64_t done) {
  const uint64_t every = static_cast<uint64_t>(std::max(1, o.every));
  const uint64_t warmup = static_cast<uint64_t>(std::max(0, o.warmup));
  if (done <= warmup) return done - 1;
  // The warm-up's syncs, then the multiples of `every` past it before `done`.
  const uint64_t cadence = (done - 1) / every - std::min((done - 1) / every, warmup / every);
  return warmup + cadence;
}

double StepsToNextSync(const SyncOptions& o, uint64_t done) {
  if (done < static_cast<uint64_t>(std::max(0, o.warmup))) return 1;
  const uint64_t every = static_cast<uint64_t>(std::max(1, o.every));
  const uint64_t next = (done / every + 1) * every;  // the next multiple of every after done
  return std::min(static_cast<double>(next - done),
                  static_cast<double>(every) / std::max(1, o.stagger));
}

Status ValidateSyncOptions(const SyncOptions& o) {
  if (o.every < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sync.every must be >= 1, not ", o.every));
  }
  if (o.stagger < 1 || o.stagger > o.every) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync.stagger must be in [1, every] = [1, ", o.every, "], not ", o.stagger,
        " (each phase of the layers syncs once every `every` steps, at its own step)"));
  }
  if (o.stagger > 1 && o.mode != SyncMode::kLocal) {
    return absl::InvalidArgumentError(
        "sync.stagger needs mode local (in mode step every gradient is summed every step)");
  }
  const int spacing = o.every / o.stagger;  // the closest two phases' sync steps
  if (o.overlap < 0 || (o.overlap > 0 && o.overlap >= spacing)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.overlap must be in [0, every / stagger) = [0, ", spacing, "), not ",
                     o.overlap, " (a sync has to finish before the next one starts)"));
  }
  if (o.overlap > 0 && o.mode != SyncMode::kLocal) {
    return absl::InvalidArgumentError(
        "sync.overlap needs mode local (in mode step the gradients are summed before each "
        "step's update)");
  }
  RETURN_IF_ERROR(ValidateOuterOptions(o.outer));
  if (o.codec != "adaptive") RETURN_IF_ERROR(FixedSyncCodec(o.codec).status());
  if (o.fanout < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sync.fanout must be >= 1, not ", o.fanout));
  }
  if (o.exponential_graph && (o.reduce != SyncReduce::kGossip || o.fanout != 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync.graph: exponential is gossip's one-peer graph: it needs sync.reduce gossip with "
        "fanout 1, not ",
        SyncReduceName(o.reduce), " with fanout ", o.fanout));
  }
  if (GossipSendsLinks(o)) {
    RETURN_IF_ERROR(GossipShape(o));
  } else if (o.reduce == SyncReduce::kGossip) {
    RETURN_IF_ERROR(GossipKeep(o).status());
  }
  if (o.tracking && o.reduce != SyncReduce::kGossip) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sync.tracking corrects gossip's local steps: it needs sync.reduce gossip, not ",
        SyncReduceName(o.reduce)));
  }
  if (o.warmup < 0) {
    return absl::InvalidArgumentError(absl::StrCat("sync.warmup must be >= 0, not ", o.warmup));
  }
  if (o.warmup > 0 && o.mode != SyncMode::kLocal) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.warmup syncs every step at the start of local steps: it needs mode "
                     "local, not mode ",
                     SyncModeName(o.mode)));
  }
  if (o.warmup > 0 && o.reduce == SyncReduce::kGossip && !IsPlainAveraging(o.outer)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.warmup with gossip mixes plain averages every step at the start: it "
                     "needs no outer step of its own (outer lr 1, momentum 0), not lr ",
                     o.outer.lr, ", momentum ", o.outer.momentum));
  }
  return absl::OkStatus();
}

Status GossipShape(const SyncOptions& o) {
  if (o.mode != SyncMode::kLocal || o.stagger != 1 || o.overlap != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.reduce gossip needs mode local with stagger 1 and overlap 0 (mode ",
                     SyncModeName(o.mode), ", stagger ", o.stagger, ", overlap ", o.overlap, ")"));
  }
  return absl::OkStatus();
}

StatusOr<compression::CodecSpec> GossipLinkCodec(std::string_view codec) {
  ASSIGN_OR_RETURN(const compression::CodecSpec spec, FixedSyncCodec(codec));
  if (spec.topk.enabled || spec.lossless()) {
    return absl::InvalidArgumentError(
        "gossip over compressed links sends every coordinate's difference in a dense lossy codec "
        "(bf16, fp16, q8, q4), not '" +
        std::string(codec) + "'");
  }
  if (spec.value.format == compression::ValueFormat::kQ2) {
    // The sender keeps each link's rounding (its value moves by what its links' copies lag
    // behind it): 2-bit rounding made Moby-Dick runs diverge with one and two out-neighbours
    // (docs/BENCHMARKS.md, "Gossip over compressed links").
    return absl::InvalidArgumentError("gossip over compressed links: '" + std::string(codec) +
                                      "' rounds too coarsely to keep the replicas stable (q2 "
                                      "diverged on real text); use q4 or finer");
  }
  return spec;
}

bool GossipSendsLinks(const SyncOptions& o) {
  return o.reduce == SyncReduce::kGossip && o.codec != "exact" && GossipLinkCodec(o.codec).ok();
}

StatusOr<double> GossipKeep(const SyncOptions& o) {
  RETURN_IF_ERROR(GossipShape(o));
  if (o.codec == "exact") return 1.0;
  const auto spec = FixedSyncCodec(o.codec);
  if (spec.ok() && spec->topk.enabled && spec->value.format == compression::ValueFormat::kFp32 &&
      !spec->zstd.enabled) {
    return spec->topk.fraction;
  }
  if (GossipSendsLinks(o)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.reduce gossip with codec ", o.codec,
                     " sends every coordinate's difference over each link (gossip_links.h), not "
                     "a fraction of fp32 shares"));
  }
  if (spec.ok() && !spec->topk.enabled && !spec->lossless()) {
    return GossipLinkCodec(o.codec).status();  // q2: why it is refused
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "sync.reduce gossip sends fp32 shares of the coordinates it picks (sync.codec exact or "
      "topk:F) or every coordinate's difference over each link in a dense codec of 4 bits or "
      "more (bf16, fp16, q8, q4), not '",
      o.codec, "'"));
}

}  // namespace longhaul::fleet
