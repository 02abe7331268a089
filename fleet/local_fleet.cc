// Replicas of one model in one process, synced in step or local mode (see local_fleet.h).
#include "fleet/local_fleet.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/splitmix64.h"
#include "fleet/gossip.h"
#include "fleet/sync_ring.h"

namespace longhaul::fleet {

StatusOr<std::unique_ptr<LocalFleet>> LocalFleet::Create(
    const model::ModelConfig& config, std::shared_ptr<const model::TokenData> train,
    const LocalFleetOptions& options, const std::vector<kernels::Ops*>& ops) {
  if (!options.skewed_shards) {
    return CreateWith(
        config,
        [&](int) {
          return model::MemoryWindows(train, options.seq_len, /*shuffle=*/true, options.seed);
        },
        options, ops);
  }
  // Replica r: the r-th contiguous part of the stream, its windows shuffled.
  const size_t size = train->tokens.size(), n = static_cast<size_t>(std::max(options.replicas, 1));
  return CreateWith(
      config,
      [&](int r) -> StatusOr<std::unique_ptr<model::WindowSource>> {
        const size_t begin = size * static_cast<size_t>(r) / n;
        const size_t end = size * (static_cast<size_t>(r) + 1) / n;
        if (end - begin < static_cast<size_t>(options.seq_len) + 1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "fleet: skewed shards of ", train->source, ": replica ", r, "'s part has ",
              end - begin, " tokens, fewer than a window's ", options.seq_len + 1));
        }
        auto part = std::make_shared<model::TokenData>();
        part->source = absl::StrCat(train->source, " (part ", r + 1, " of ", n, ")");
        part->format = train->format;
        part->tokens.assign(train->tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                            train->tokens.begin() + static_cast<std::ptrdiff_t>(end));
        part->max_token = train->max_token;
        return model::MemoryWindows(std::move(part), options.seq_len, /*shuffle=*/true,
                                    options.seed);
      },
      options, ops);
}

StatusOr<std::unique_ptr<LocalFleet>> LocalFleet::Create(const model::ModelConfig& config,
                                                         const WindowFactory& windows,
                                                         const LocalFleetOptions& options,
                                                         const std::vector<kernels::Ops*>& ops) {
  if (options.skewed_shards) {
    return absl::InvalidArgumentError("fleet: skewed shards need the token stream itself");
  }
  return CreateWith(
      config, [&](int) { return windows(); }, options, ops);
}

StatusOr<std::unique_ptr<LocalFleet>> LocalFleet::CreateWith(
    const model::ModelConfig& config, const ReplicaWindows& windows,
    const LocalFleetOptions& options, const std::vector<kernels::Ops*>& ops) {
  if (options.replicas < 1 || static_cast<int>(ops.size()) != options.replicas) {
    return absl::InvalidArgumentError(
        absl::StrCat("fleet: ", options.replicas, " replicas on ", ops.size(), " backends"));
  }
  if (options.microbatches < 1) {
    return absl::InvalidArgumentError("fleet: microbatches per step must be >= 1");
  }
  if (!options.replica_microbatches.empty()) {
    if (static_cast<int>(options.replica_microbatches.size()) != options.replicas) {
      return absl::InvalidArgumentError(absl::StrCat("fleet: ", options.replica_microbatches.size(),
                                                     " microbatch counts for ", options.replicas,
                                                     " replicas"));
    }
    for (int m : options.replica_microbatches) {
      if (m < 1) return absl::InvalidArgumentError("fleet: microbatches per step must be >= 1");
    }
  }
  RETURN_IF_ERROR(ValidateSyncOptions(options.sync));
  if (options.sync.stagger > config.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("fleet: sync.stagger ", options.sync.stagger,
                                                   " is more phases than the model's ",
                                                   config.num_layers, " layers"));
  }
  const size_t n = static_cast<size_t>(options.replicas);
  if (!options.bandwidth.empty()) {
    bool square = options.bandwidth.size() == n;
    for (const auto& row : options.bandwidth) square = square && row.size() == n;
    if (!square) {
      return absl::InvalidArgumentError(absl::StrCat("fleet: a link matrix of ",
                                                     options.bandwidth.size(), " rows for ",
                                                     options.replicas, " replicas (N x N needed)"));
    }
  }
  if (!(options.missing_links >= 0 && options.missing_links < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("fleet: missing_links must be in [0, 1), not ", options.missing_links));
  }
  std::unique_ptr<LocalFleet> fleet(new LocalFleet(config, options));
  const model::FragmentLayout whole(config, 0, config.num_layers);
  fleet->slices_ = SyncSlices(whole);
  if (GossipSendsLinks(options.sync)) {
    // The job's own spelling (sync: {reduce: gossip, codec: q4}); ValidateSyncOptions has
    // checked it.
    ASSIGN_OR_RETURN(
        fleet->gossip_,
        LinkGossipMixer::Create(options.replicas, static_cast<size_t>(model::NumParameters(config)),
                                fleet->slices_, options.sync.codec, options.sync.tracking,
                                options.sync.outer));
  } else if (options.sync.reduce == SyncReduce::kGossip) {
    ASSIGN_OR_RETURN(const double keep, GossipKeep(options.sync));
    fleet->gossip_ = std::make_unique<GossipMixer>(
        options.replicas, static_cast<size_t>(model::NumParameters(config)), fleet->slices_, keep,
        options.sync.tracking, options.sync.outer);
  }
  for (const SyncSlice& slice : fleet->slices_) {
    fleet->phases_.push_back(SlicePhase(whole.model(), slice.index, options.sync.stagger));
  }
  for (int r = 0; r < options.replicas; ++r) {
    Replica rep;
    model::ChainOptions co;
    co.fragments = options.fragments;
    co.batch_size = options.batch_size;
    co.seq_len = options.seq_len;
    ASSIGN_OR_RETURN(rep.chain, model::FragmentChain::Create(config, co, ops[r]));
    model::DataLoaderOptions lo;
    lo.batch_size = options.batch_size;
    lo.seq_len = options.seq_len;
    lo.seed = options.seed;
    std::vector<int64_t> blocks;  // one step's windows of each replica
    for (int q = 0; q < options.replicas; ++q) {
      blocks.push_back(static_cast<int64_t>(options.batch_size) * options.microbatches_of(q));
    }
    if (!options.skewed_shards) model::SetShard(blocks, r, &lo);
    ASSIGN_OR_RETURN(auto source, windows(r));
    ASSIGN_OR_RETURN(rep.loader, model::DataLoader::Create(std::move(source), lo));
    for (size_t k = 0; k < fleet->slices_.size(); ++k) {
      ASSIGN_OR_RETURN(auto encoder, ContributionEncoder::Create(options.sync.codec));
      rep.encoders.push_back(std::move(encoder));
    }
    fleet->replicas_.push_back(std::move(rep));
  }
  return fleet;
}

void LocalFleet::InitParameters(uint64_t seed) {
  for (Replica& r : replicas_) r.chain->InitParameters(seed);
  std::vector<float> params(static_cast<size_t>(model::NumParameters(config_)));
  replicas_[0].chain->StoreIntoModel(params.data());
  outer_.Reset(params);
  if (gossip_ != nullptr) gossip_->Reset(params);
}

StatusOr<FleetStepResult> LocalFleet::TrainStep(const model::OptimizerOptions& optimizer, int step,
                                                int total_steps) {
  for (int m : Microbatches()) {
    traffic_.tokens += static_cast<uint64_t>(options_.batch_size) * options_.seq_len * m;
  }
  return options_.sync.mode == SyncMode::kStep ? StepMode(optimizer, step, total_steps)
                                               : LocalMode(optimizer, step, total_steps);
}

std::vector<int> LocalFleet::Microbatches() const {
  std::vector<int> m;
  for (int r = 0; r < size(); ++r) m.push_back(options_.microbatches_of(r));
  return m;
}

Status LocalFleet::Reduce(const std::vector<std::vector<float>>& contributions,
                          const std::vector<float>& weights, uint64_t seed, int phase,
                          std::vector<float>* sum) {
  const auto start = std::chrono::steady_clock::now();
  const size_t n = replicas_.size();
  sum->resize(contributions[0].size());
  std::vector<std::vector<uint8_t>> frames(n);
  const int num_slices = static_cast<int>(slices_.size());
  for (size_t k = 0; k < slices_.size(); ++k) {
    if (!InPhase(phases_[k], phase)) continue;
    const size_t offset = static_cast<size_t>(slices_[k].offset);
    const size_t size = static_cast<size_t>(slices_[k].size);
    if (options_.sync.reduce == SyncReduce::kRing) {
      std::vector<std::span<const float>> parts;
      std::vector<compression::FeedbackEncoder*> encoders;
      std::vector<uint64_t> seeds;
      for (size_t r = 0; r < n; ++r) {
        parts.emplace_back(contributions[r].data() + offset, size);
        encoders.push_back(replicas_[r].encoders[k].get());
        seeds.push_back(
            SyncSeed(seed, slices_[k].index, num_slices, static_cast<int>(r), static_cast<int>(n)));
      }
      RETURN_IF_ERROR(RingReduce(parts, weights, encoders, seeds,
                                 std::span<float>(sum->data() + offset, size),
                                 &traffic_.wire_bytes));
      traffic_.raw_bytes += size * sizeof(float) * static_cast<size_t>(RingHops(int(n)));
      continue;
    }
    for (size_t r = 0; r < n; ++r) {
      const std::span<const float> part(contributions[r].data() + offset, size);
      const uint64_t s =
          SyncSeed(seed, slices_[k].index, num_slices, static_cast<int>(r), static_cast<int>(n));
      RETURN_IF_ERROR(replicas_[r].encoders[k]->Encode(part, s, &frames[r]));
      traffic_.wire_bytes += frames[r].size() * (n - 1);
      traffic_.raw_bytes += size * sizeof(float) * (n - 1);
    }
    std::vector<std::span<const uint8_t>> views(frames.begin(), frames.end());
    RETURN_IF_ERROR(SumContributions(views, weights, std::span<float>(sum->data() + offset, size)));
  }
  ++traffic_.syncs;
  traffic_.codec_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

StatusOr<FleetStepResult> LocalFleet::StepMode(const model::OptimizerOptions& optimizer, int step,
                                               int total_steps) {
  const size_t n = replicas_.size();
  const std::vector<int> microbatches = Microbatches();
  int all = 0;
  for (int m : microbatches) all += m;
  // Each replica's share of the union batch's mean: its microbatches are M_r of all of them.
  const float dloss = 1.0f / (float(options_.batch_size) * options_.seq_len * float(all));
  const size_t P = static_cast<size_t>(model::NumParameters(config_));
  std::vector<std::vector<float>> grads(n, std::vector<float>(P));
  double loss_sum = 0;
  for (size_t r = 0; r < n; ++r) {
    model::FragmentChain& chain = *replicas_[r].chain;
    ASSIGN_OR_RETURN(const double sum,
                     chain.AccumulateGradients(*replicas_[r].loader, microbatches[r], dloss));
    loss_sum += sum;
    chain.ReduceGradients();  // the tied embedding's parts, inside the replica
    chain.GetGradients(grads[r].data());
  }
  std::vector<float> total;
  RETURN_IF_ERROR(
      Reduce(grads, std::vector<float>(n, 1.0f), static_cast<uint64_t>(step), kEveryPhase, &total));
  const float lr = model::LearningRate(optimizer, step, total_steps);
  for (Replica& r : replicas_) {
    r.chain->SetGradients(total.data());
    const float scale = model::ClipScale(r.chain->GradientNorm(), optimizer.grad_clip);
    r.chain->ApplyStep(optimizer, lr, scale, step + 1);
  }
  FleetStepResult result;
  result.loss = static_cast<float>(loss_sum / double(all));
  result.synced = true;
  return result;
}

StatusOr<FleetStepResult> LocalFleet::LocalMode(const model::OptimizerOptions& optimizer, int step,
                                                int total_steps) {
  const size_t n = replicas_.size();
  const std::vector<int> microbatches = Microbatches();
  double loss_sum = 0;
  int all = 0;
  for (size_t r = 0; r < n; ++r) {
    Replica& rep = replicas_[r];
    ASSIGN_OR_RETURN(const model::StepResult s, rep.chain->TrainStep(*rep.loader, microbatches[r],
                                                                     optimizer, step, total_steps));
    if (gossip_ != nullptr && gossip_->tracking()) {  // the step's correction
      std::vector<float> x(static_cast<size_t>(model::NumParameters(config_)));
      rep.chain->StoreIntoModel(x.data());
      gossip_->Correct(static_cast<int>(r), x, s.lr);
      rep.chain->LoadFromModel(x.data());
    }
    // The mean over every replica's microbatches (each step's loss is over its own).
    loss_sum += static_cast<double>(s.loss) * microbatches[r];
    all += microbatches[r];
  }
  FleetStepResult result;
  result.loss = static_cast<float>(loss_sum / double(all));
  const LocalSyncAction action = LocalSyncAt(options_.sync, static_cast<uint64_t>(step) + 1,
                                             static_cast<uint64_t>(total_steps));
  if (gossip_ != nullptr) {  // stagger 1, overlap 0: every sync blocks
    if (action.blocking) {
      RETURN_IF_ERROR(
          GossipSync(static_cast<uint64_t>(step) + 1, static_cast<uint64_t>(total_steps), &result));
    }
    return result;
  }
  const size_t P = outer_.size();
  std::vector<float> params(P);
  if (action.finish) {  // the streaming sync started `overlap` steps ago
    OuterStep(action.started, pending_phase_, pending_mean_);
    for (size_t r = 0; r < n; ++r) {
      replicas_[r].chain->StoreIntoModel(params.data());
      for (size_t k = 0; k < slices_.size(); ++k) {
        if (!InPhase(phases_[k], pending_phase_)) continue;
        const size_t offset = static_cast<size_t>(slices_[k].offset);
        const size_t size = static_cast<size_t>(slices_[k].size);
        outer_.RebasePart(offset, std::span<const float>(started_[r].data() + offset, size),
                          std::span<float>(params.data() + offset, size));
      }
      replicas_[r].chain->LoadFromModel(params.data());
    }
    started_.clear();
    pending_mean_.clear();
    result.synced = true;
  }
  if (!action.start && !action.blocking) return result;
  std::vector<std::vector<float>> deltas(n, std::vector<float>(P));
  if (action.start) started_.assign(n, std::vector<float>(P));
  for (size_t r = 0; r < n; ++r) {
    replicas_[r].chain->StoreIntoModel(params.data());
    outer_.PseudoGradient(params, deltas[r]);
    if (action.start) started_[r] = params;
  }
  // Each pseudo-gradient weighs by the tokens its replica trained since the last sync.
  std::vector<float> mean;
  RETURN_IF_ERROR(
      Reduce(deltas, TokenWeights(microbatches), static_cast<uint64_t>(step), action.phase, &mean));
  if (action.start) {  // applied `overlap` steps later
    pending_mean_ = std::move(mean);
    pending_phase_ = action.phase;
    return result;
  }
  OuterStep(static_cast<uint64_t>(step) + 1, action.phase, mean);
  for (Replica& r : replicas_) {
    if (action.phase == kEveryPhase) {
      r.chain->LoadFromModel(outer_.anchor().data());
      continue;
    }
    r.chain->StoreIntoModel(params.data());  // the phase's slices from the new anchor
    for (size_t k = 0; k < slices_.size(); ++k) {
      if (!InPhase(phases_[k], action.phase)) continue;
      std::copy_n(outer_.anchor().begin() + slices_[k].offset, slices_[k].size,
                  params.begin() + slices_[k].offset);
    }
    r.chain->LoadFromModel(params.data());
  }
  result.synced = true;
  return result;
}

std::vector<std::vector<double>> LocalFleet::RoundLinks(uint64_t round) const {
  const size_t n = replicas_.size();
  std::vector<std::vector<double>> links = options_.bandwidth;
  if (links.empty()) links.assign(n, std::vector<double>(n, 1.0));
  if (options_.missing_links > 0) {
    // Each directed link down with probability missing_links, drawn from (seed, round).
    SplitMix64 rng(options_.seed * 0x2545F4914F6CDD1Dull ^ (round + 1) * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        const double u = rng.Uniform();
        if (i != j && u < options_.missing_links) links[i][j] = 0;
      }
    }
  }
  return links;
}

Status LocalFleet::GossipSync(uint64_t done, uint64_t total, FleetStepResult* result) {
  const auto start = std::chrono::steady_clock::now();
  const size_t n = replicas_.size(), P = static_cast<size_t>(model::NumParameters(config_));
  std::vector<std::vector<float>> params(n, std::vector<float>(P));
  std::vector<std::vector<double>> estimates(n, std::vector<double>(P));
  for (size_t r = 0; r < n; ++r) {
    replicas_[r].chain->StoreIntoModel(params[r].data());
    std::copy(params[r].begin(), params[r].end(), estimates[r].begin());
  }
  result->consensus = ConsensusDistance(estimates);
  const GossipGraph graph =
      options_.sync.exponential_graph
          ? ExponentialGossipGraph(RoundLinks(gossip_rounds_), gossip_rounds_)
          : ChooseGossipGraph(RoundLinks(gossip_rounds_), options_.sync.fanout, options_.seed,
                              gossip_rounds_);
  ASSIGN_OR_RETURN(const uint64_t round_bytes, gossip_->Round(graph, &params));
  traffic_.wire_bytes += round_bytes;
  for (size_t r = 0; r < n; ++r) {
    traffic_.raw_bytes += P * sizeof(float) * graph.out[r].size();
  }
  ++gossip_rounds_;
  if (done == total) {
    // The job's end: one exact average, every replica's values and weights of every slice to
    // every other (dense frames: 8 bytes a coordinate).
    RETURN_IF_ERROR(gossip_->Average(&params));
    uint64_t frames = 0;
    for (const SyncSlice& s : slices_) {
      frames += GossipFrameBytes(static_cast<uint64_t>(s.size), static_cast<uint64_t>(s.size));
    }
    traffic_.wire_bytes += frames * n * (n - 1);
    traffic_.final_bytes += frames * n * (n - 1);
    traffic_.raw_bytes += P * sizeof(float) * n * (n - 1);
  }
  for (size_t r = 0; r < n; ++r) replicas_[r].chain->LoadFromModel(params[r].data());
  ++traffic_.syncs;
  traffic_.codec_seconds +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result->synced = true;
  return absl::OkStatus();
}

void LocalFleet::OuterStep(uint64_t done, int phase, const std::vector<float>& mean) {
  const OuterOptions outer = OuterStepAt(options_.sync, done);
  if (phase == kEveryPhase) {
    outer_.Step(outer, mean);
    return;
  }
  for (size_t k = 0; k < slices_.size(); ++k) {
    if (!InPhase(phases_[k], phase)) continue;
    const size_t offset = static_cast<size_t>(slices_[k].offset);
    outer_.StepPart(
        outer, offset,
        std::span<const float>(mean.data() + offset, static_cast<size_t>(slices_[k].size)));
  }
}

float LocalFleet::MaxDivergence() const {
  const size_t P = static_cast<size_t>(model::NumParameters(config_));
  std::vector<float> first(P), other(P);
  replicas_[0].chain->StoreIntoModel(first.data());
  float worst = 0;
  for (size_t r = 1; r < replicas_.size(); ++r) {
    replicas_[r].chain->StoreIntoModel(other.data());
    for (size_t i = 0; i < P; ++i) {
      const float d = std::fabs(other[i] - first[i]);
      // A NaN (in either replica) is divergence, not agreement: std::max would drop it and a
      // fleet whose replicas all went NaN read as in sync.
      if (std::isnan(d)) return std::numeric_limits<float>::quiet_NaN();
      worst = std::max(worst, d);
    }
  }
  return worst;
}

}  // namespace longhaul::fleet
