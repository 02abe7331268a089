// The cost model's pricing: tables built once per (model, workload, profiles), the codec
// choice, and the step's schedule inputs for a pipeline (see cost_model.h). Explanations
// (Estimate) live in cost_model_explain.cc.
#include "scheduler/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/fragment.h"
#include "model/layout.h"
#include "model/replicated_fragment.h"
#include "scheduler/in_flight.h"
#include "scheduler/schedule.h"
#include "scheduler/shard_plan.h"

namespace longhaul::scheduler {
namespace {

// A huge bandwidth: Controller::Predict minus the wire time, i.e. the codec's own time.
constexpr double kNoWire = 1e300;

int Position(bool first, bool last) { return (first ? 1 : 0) + (last ? 2 : 0); }

// A representative fragment of n layers at a position; false when none exists.
bool Range(int L, int n, bool first, bool last, int* begin, int* end) {
  if (first && last) {
    *begin = 0, *end = L;
    return n == L;
  }
  if (first) *begin = 0, *end = n;
  if (last) *begin = L - n, *end = L;
  if (!first && !last) *begin = 1, *end = 1 + n;
  return n >= 1 && (first || last ? n <= L - 1 : n <= L - 2);
}

}  // namespace

CostModel::CostModel(const model::ModelConfig& model, const PipelineWorkload& workload,
                     const Profiles& profiles, const CostModelOptions& options,
                     compression::Controller controller)
    : model_(model),
      workload_(workload),
      profiles_(profiles),
      options_(options),
      controller_(std::move(controller)) {}

StatusOr<CostModel> CostModel::Create(const model::ModelConfig& model, const PipelineWorkload& w,
                                      const Profiles& profiles, const CostModelOptions& options) {
  RETURN_IF_ERROR(model::ValidateConfig(model));
  RETURN_IF_ERROR(ValidateProfiles(profiles));
  if (w.microbatch_size <= 0 || w.seq_len <= 0 || w.microbatches <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cost model: microbatch size (", w.microbatch_size, "), sequence length (",
                     w.seq_len, ") and microbatches (", w.microbatches, ") must be positive"));
  }
  if (w.seq_len > model.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("cost model: sequence length ", w.seq_len,
                                                   " exceeds the context ", model.max_seq_len));
  }
  if (!(options.encode_fraction >= 0 && options.encode_fraction <= 1)) {
    return absl::InvalidArgumentError("cost model: encode_fraction must be in [0, 1]");
  }
  if (options.controller.ladder.size() > 16) {
    return absl::InvalidArgumentError("cost model: at most 16 codecs on the ladder");
  }
  ASSIGN_OR_RETURN(compression::Controller controller,
                   compression::Controller::Create(options.controller));
  CostModel m(model, w, profiles, options, std::move(controller));
  const compression::Controller& c = m.controller_;
  auto rung = [&](const std::string& spec, const char* what) -> StatusOr<int> {
    auto r = c.FindRung(spec);
    if (!r.ok()) return Annotate(r.status(), absl::StrCat("cost model: ", what));
    return *r;
  };
  ASSIGN_OR_RETURN(m.fp32_rung_, rung("fp32", "exact transfers"));
  ASSIGN_OR_RETURN(m.floor_rung_, rung(w.floor, "compression floor"));
  m.coordinate_floor_rung_ = m.floor_rung_;
  if (!w.coordinate_floor.empty()) {
    ASSIGN_OR_RETURN(m.coordinate_floor_rung_,
                     rung(w.coordinate_floor, "compression floor of subspace coordinates"));
  }
  if (w.compression == "off") {
    m.fixed_rung_ = m.fp32_rung_;
  } else if (w.compression == "fixed") {
    ASSIGN_OR_RETURN(m.fixed_rung_, rung(w.codec, "compression codec"));
  } else if (w.compression != "adaptive") {
    return absl::InvalidArgumentError(absl::StrCat("cost model: compression mode '", w.compression,
                                                   "' is not off, fixed or adaptive"));
  }
  if (!w.coordinator.empty()) {
    m.coordinator_ = profiles.SiteIndex(w.coordinator);
    if (m.coordinator_ < 0) {
      return absl::NotFoundError(
          absl::StrCat("cost model: no profile for the coordinator site '", w.coordinator, "'"));
    }
  }

  const int L = model.num_layers, M = w.microbatches, B = w.microbatch_size, T = w.seq_len;
  m.layer_fwd_flops_ = LayerForwardFlops(model, B, T);
  m.head_fwd_flops_ = HeadForwardFlops(model, B, T);
  m.max_slots_ = std::min(M, L);
  m.memory_.assign(static_cast<size_t>(L + 1) * 4 * m.max_slots_, -1);
  m.params_.assign(static_cast<size_t>(L + 1) * 4, -1);
  // Sites of several devices: the least a device needs, each stage sharded across them.
  for (const SiteProfile& site : profiles.sites) {
    if (site.devices > 1) m.sharded_memory_[site.devices].assign(m.memory_.size(), -1);
  }
  for (int n = 1; n <= L; ++n) {
    for (int pos = 0; pos < 4; ++pos) {
      int begin = 0, end = 0;
      if (!Range(L, n, pos & 1, pos & 2, &begin, &end)) continue;
      m.params_[n * 4 + pos] = model::FragmentLayout(model, begin, end).total();
      const size_t row = (static_cast<size_t>(n) * 4 + pos) * m.max_slots_;
      for (int slots = 1; slots <= m.max_slots_; ++slots) {
        model::FragmentOptions fo;
        fo.begin = begin, fo.end = end, fo.batch_size = B, fo.seq_len = T, fo.slots = slots;
        m.memory_[row + slots - 1] =
            model::ReplicatedFragment::EstimateMemory(model, fo, 1)[0].total();
      }
      for (auto& [devices, table] : m.sharded_memory_) {
        // Each slot adds one microbatch's activations, the same bytes in every mode: the
        // least grows by a fixed step, so two slots' figures give the rest exactly.
        ASSIGN_OR_RETURN(const int64_t one,
                         LeastShardedBytes({model, begin, end, B, T, M, 1}, devices));
        int64_t step = 0;
        if (m.max_slots_ >= 2) {
          ASSIGN_OR_RETURN(const int64_t two,
                           LeastShardedBytes({model, begin, end, B, T, M, 2}, devices));
          step = two - one;
        }
        for (int slots = 1; slots <= m.max_slots_; ++slots) {
          table[row + slots - 1] = one + (slots - 1) * step;
        }
      }
    }
  }

  const int N = m.num_sites();
  m.bw_.assign(static_cast<size_t>(N) * N, 0);
  m.rtt_.assign(m.bw_.size(), 0);
  for (const LinkProfile& l : profiles.links) {
    const size_t k = static_cast<size_t>(profiles.SiteIndex(l.from)) * N + profiles.SiteIndex(l.to);
    m.bw_[k] = l.bandwidth_bytes_per_second;
    m.rtt_[k] = l.rtt_seconds;
  }
  // Encoded bytes and codec time of each rung, from the controller's own prediction.
  auto price = [&](int r, double raw_bytes, double* wire, double* codec) {
    compression::ControllerInput in;
    in.tensor_bytes = static_cast<uint64_t>(raw_bytes);
    in.bandwidth_bytes_per_second = kNoWire;
    *codec = c.Predict(r, in);
    in.bandwidth_bytes_per_second = 1;
    *wire = c.Predict(r, in) - *codec;
  };
  for (int wide = 0; wide < 2; ++wide) {
    const double act_bytes = m.ActivationBytes(wide == 1);
    for (int r = 0; r < c.rungs(); ++r) {
      double wire = 0, codec = 0;
      price(r, act_bytes, &wire, &codec);
      m.rung_wire_bytes_[wide].push_back(wire);
      m.rung_codec_seconds_[wide].push_back(codec);
    }
  }
  // The subspace-cut variant's later stages get each sequence's T + 1 tokens, not T targets.
  m.targets_bytes_ = 4.0 * B * (model::Subspace(model) ? T + 1 : T);
  price(m.fp32_rung_, m.targets_bytes_, &m.targets_bytes_, &m.targets_codec_seconds_);
  // The tied embedding's gradient: all of wte, as the family's layout has it.
  m.tied_bytes_ =
      model::TiedHead(model) ? 4.0 * model::ParameterLayout(model).size(model::Tensor::kWte) : 0.0;
  if (m.tied_bytes_ > 0) {  // an untied head (subspace-cut variant, untied llama) exchanges nothing
    price(m.fp32_rung_, m.tied_bytes_, &m.tied_wire_bytes_, &m.tied_codec_seconds_);
  }
  return m;
}

double CostModel::ActivationBytes(bool wide) const {
  // The subspace-cut variant's constrained cuts carry K floats per position, a cut after its
  // first unconstrained layer C (WideCut).
  return 4.0 * workload_.microbatch_size * workload_.seq_len *
         (wide ? model_.channels : model::CutWidth(model_));
}

bool CostModel::WideCut(int boundary) const {
  return model::StreamWidth(model_, boundary) > model::CutWidth(model_);
}

double CostModel::Forward(int site, int n, bool last) const {
  return (n * layer_fwd_flops_ + (last ? head_fwd_flops_ : 0)) / profiles_.sites[site].flops;
}

double CostModel::Backward(int site, int n, bool last) const {
  return kBackwardFlopsFactor * Forward(site, n, last);
}

bool CostModel::HasLink(int from, int to) const {
  return bw_[static_cast<size_t>(from) * num_sites() + to] > 0;
}

double CostModel::HalfRtt(int a, int b) const {
  if (a == b) return 0;
  if (!HasLink(a, b)) return kInfeasible;
  return rtt_[static_cast<size_t>(a) * num_sites() + b] / 2;
}

int CostModel::PickRung(int from, int to, double budget, double first_budget, bool wide) const {
  if (fixed_rung_ >= 0) return fixed_rung_;
  const size_t k = static_cast<size_t>(from) * num_sites() + to;
  // The controller's view of a transfer is its serialisation time alone, as the stage runner
  // feeds it (rtt 0): transfers are pipelined, and no codec shortens the round trip.
  const double bw = bw_[k];
  const double margin = options_.controller.upgrade_margin;
  double t[16];
  int fastest = 0;
  const int rungs = std::min(floor_rung(wide) + 1, 16);
  for (int r = 0; r < rungs; ++r) {
    t[r] = rung_wire_bytes_[wide][r] / bw + rung_codec_seconds_[wide][r];
    if (t[r] < t[fastest]) fastest = r;
  }
  auto least_lossy = [&](double limit) {
    for (int r = 0; r < rungs; ++r) {
      if (t[r] <= limit) return r;
    }
    return -1;
  };
  const int fit = least_lossy(budget), fit_margin = least_lossy((1 - margin) * budget);
  if (options_.settling == CostModelOptions::Settling::kUnderNoise) {
    return fit_margin >= 0 ? fit_margin : fit >= 0 ? fit : fastest;
  }
  // Rule 2: the first decision.
  const int first = least_lossy(first_budget > 0 ? first_budget : budget);
  int r = first >= 0 ? first : fastest;
  for (int round = 0; round < 4; ++round) {
    int next = r;
    if (t[r] > budget) {  // rules 3 and 5: downgrade at once
      if (fit >= 0) {
        next = fit_margin >= 0 ? fit_margin : fit;
      } else if (fastest != r && t[fastest] < (1 - margin) * t[r]) {
        next = fastest;
      }
    } else if (fit_margin >= 0 && fit_margin < r) {  // rule 4: upgrade after a window
      next = fit_margin;
    }
    if (next == r) break;
    r = next;
  }
  return r;
}

compression::Decision CostModel::SteadyDecision(int from, int to, double raw_bytes, double budget,
                                                double first_budget) const {
  const size_t k = static_cast<size_t>(from) * num_sites() + to;
  compression::ControllerInput in;
  in.bandwidth_bytes_per_second = bw_[k];
  in.rtt_seconds = 0;  // as the stage runner feeds its controllers (see PickRung)
  in.tensor_bytes = static_cast<uint64_t>(raw_bytes);
  // A wide cut's tensor (ActivationBytes(true)) settles on its own rung, within its floor.
  const bool wide = raw_bytes != ActivationBytes(false) && raw_bytes == ActivationBytes(true);
  in.quality_floor = floor_rung(wide);
  in.budget_seconds = first_budget > 0 ? first_budget : budget;
  compression::ControllerState state;
  compression::Decision d;
  if (options_.settling == CostModelOptions::Settling::kUnderNoise) {
    // Start from the settled codec: the controller keeps it and says why.
    state.rung = PickRung(from, to, budget, first_budget, wide);
    in.budget_seconds = budget;
    auto kept = controller_.Decide(in, state);
    if (kept.ok()) d = *kept;
    return d;
  }
  // Decisions a hysteresis window apart, until the codec stays.
  for (int round = 0; round < 8; ++round) {
    auto next = controller_.Decide(in, state);
    if (!next.ok()) break;
    d = *next;
    if (round > 1 && !d.changed) break;
    state = d.next;
    in.budget_seconds = budget;
    in.now_seconds += options_.controller.hysteresis_window_seconds + 1;
  }
  return d;
}

TransferCost CostModel::PriceRung(int from, int to, int rung, bool with_targets, bool wide) const {
  const size_t k = static_cast<size_t>(from) * num_sites() + to;
  TransferCost t;
  t.rung = rung;
  t.wire_bytes = rung_wire_bytes_[wide][rung] + (with_targets ? targets_bytes_ : 0);
  t.wire_seconds = t.wire_bytes / bw_[k];
  t.latency_seconds = rtt_[k] / 2;
  const double codec =
      rung_codec_seconds_[wide][rung] + (with_targets ? targets_codec_seconds_ : 0);
  t.encode_seconds = options_.encode_fraction * codec;
  t.decode_seconds = (1 - options_.encode_fraction) * codec;
  return t;
}

TransferCost CostModel::Activation(int from, int to, double budget, bool wide) const {
  return PriceRung(from, to, PickRung(from, to, budget, options_.initial_budget_seconds, wide),
                   true, wide);
}

TransferCost CostModel::Gradient(int from, int to, double budget, bool wide) const {
  return PriceRung(from, to, PickRung(from, to, budget, 0, wide), false, wide);
}

TransferCost CostModel::TiedGradient(int from, int to) const {
  const size_t k = static_cast<size_t>(from) * num_sites() + to;
  TransferCost t;
  t.rung = fp32_rung_;
  t.wire_bytes = tied_wire_bytes_;
  t.wire_seconds = t.wire_bytes / bw_[k];
  t.latency_seconds = rtt_[k] / 2;
  t.encode_seconds = options_.encode_fraction * tied_codec_seconds_;
  t.decode_seconds = (1 - options_.encode_fraction) * tied_codec_seconds_;
  return t;
}

int64_t CostModel::MemoryAt(const std::vector<int64_t>& table, int n, bool first, bool last,
                            int slots) const {
  if (n < 1 || n > num_layers()) return -1;
  const size_t row = (static_cast<size_t>(n) * 4 + Position(first, last)) * max_slots_;
  if (slots > max_slots_ && max_slots_ >= 2) {
    // More slots than layers (more microbatches in flight than plain 1F1B's): each slot is
    // one more microbatch's activations, so the memory grows linearly.
    const int64_t top = table[row + max_slots_ - 1], below = table[row + max_slots_ - 2];
    if (top < 0 || below < 0) return -1;
    return top + static_cast<int64_t>(slots - max_slots_) * (top - below);
  }
  slots = std::clamp(slots, 1, max_slots_);
  return table[row + slots - 1];
}

int64_t CostModel::Memory(int n, bool first, bool last, int slots) const {
  return MemoryAt(memory_, n, first, last, slots);
}

int64_t CostModel::SiteMemory(int site, int n, bool first, bool last, int slots) const {
  const int devices = profiles_.sites[site].devices;
  if (devices <= 1) return Memory(n, first, last, slots);
  const int64_t one = MemoryAt(sharded_memory_.at(devices), n, first, last, slots);
  return one < 0 ? -1 : one * devices;
}

bool CostModel::Fits(int site, int n, bool first, bool last, int slots) const {
  const SiteProfile& p = profiles_.sites[site];
  const int64_t need = SiteMemory(site, n, first, last, slots);
  if (need < 0 || (p.memory_bytes > 0 && need > p.memory_bytes)) return false;
  return p.devices <= 1 || p.device_memory_bytes == 0 || need / p.devices <= p.device_memory_bytes;
}

int64_t CostModel::Parameters(int n, bool first, bool last) const {
  if (n < 1 || n > num_layers()) return -1;
  return params_[n * 4 + Position(first, last)];
}

double CostModel::Optimizer(int site, int n, bool first, bool last) const {
  const double rate = profiles_.sites[site].optimizer_params_per_second;
  return rate > 0 ? std::max<int64_t>(Parameters(n, first, last), 0) / rate : 0;
}

bool CostModel::BuildSchedule(const Pipeline& p, ScheduleInputs* in, bool check_memory) const {
  const int S = static_cast<int>(p.sites.size()), M = workload_.microbatches;
  if (S == 0 || p.layers.size() != p.sites.size()) return false;
  in->microbatches = M;
  in->release.assign(S, 0), in->optimizer.assign(S, 0), in->report.assign(S, 0);
  in->forward.assign(S, 0), in->backward.assign(S, 0);
  in->act_wire.assign(S - 1, 0), in->act_latency.assign(S - 1, 0);
  in->grad_wire.assign(S - 1, 0), in->grad_latency.assign(S - 1, 0);
  const int coordinator = coordinator_ >= 0 ? coordinator_ : p.sites[0];
  // Warm-ups the stages run (in_flight.h): a fixed extra's slots must fit, as the stage
  // runner requires; the WAN-aware ones come after the links are priced.
  const int extra = workload_.extra_in_flight;
  const std::vector<int> fixed = extra > 0 ? ExtraWarmups(S, M, extra) : std::vector<int>{};
  int covered = 0;
  for (int i = 0; i < S; ++i) {
    const int s = p.sites[i], n = p.layers[i];
    const bool first = i == 0, last = i == S - 1;
    covered += n;
    const int slots = extra > 0 ? std::min(M, fixed[i] + 1) : std::min(M, S - i);
    if (n < 1 || (check_memory && !Fits(s, n, first, last, slots))) return false;
    in->forward[i] += Forward(s, n, last);
    in->backward[i] += Backward(s, n, last);
    in->optimizer[i] = Optimizer(s, n, first, last);
    in->release[i] = HalfRtt(coordinator, s);
    in->report[i] = HalfRtt(s, coordinator);
    if (!std::isfinite(in->release[i]) || !std::isfinite(in->report[i])) return false;
    if (last) break;
    const int t = p.sites[i + 1], nt = p.layers[i + 1];
    if (!HasLink(s, t) || !HasLink(t, s) || nt < 1) return false;
    const bool wide = WideCut(covered);  // the cut after layer covered - 1
    const TransferCost a = Activation(s, t, Budget(s, n, false), wide);
    const TransferCost g = Gradient(t, s, Budget(t, nt, i + 1 == S - 1), wide);
    in->act_wire[i] = a.wire_seconds, in->act_latency[i] = a.latency_seconds;
    in->grad_wire[i] = g.wire_seconds, in->grad_latency[i] = g.latency_seconds;
    in->forward[i] += a.encode_seconds;
    in->forward[i + 1] += a.decode_seconds;
    in->backward[i] += g.decode_seconds;
    in->backward[i + 1] += g.encode_seconds;
  }
  if (covered != num_layers()) return false;
  if (extra > 0) in->warmup = fixed;
  if (extra == PipelineWorkload::kAutoInFlight && S > 1) {
    InFlightInputs f;
    f.microbatches = M;
    for (int i = 0; i < S; ++i) {
      f.compute.push_back(in->forward[i] + in->backward[i]);
      // The most warm-ups whose slots fit the site (the stage runner bounds its extra slots
      // further: as much memory again as the plain stage, or 1 GiB).
      const int s = p.sites[i], n = p.layers[i];
      int lo = std::min(M, S - i - 1), hi = M;
      while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (Fits(s, n, i == 0, i == S - 1, std::min(M, mid + 1))) {
          lo = mid;
        } else {
          hi = mid - 1;
        }
      }
      f.max_warmup.push_back(lo);
    }
    for (int k = 0; k + 1 < S; ++k) {
      f.rtt.push_back(in->act_latency[k] + in->grad_latency[k]);
      f.act_wire.push_back(in->act_wire[k]);
      f.grad_wire.push_back(in->grad_wire[k]);
    }
    in->warmup = WanAwareWarmups(f);
  }
  in->tied_exchange = TiedExchange();
  if (S > 1 && TiedExchange()) {
    const int a = p.sites[0], b = p.sites[S - 1];
    if (!HasLink(a, b) || !HasLink(b, a)) return false;
    const TransferCost fl = TiedGradient(a, b), lf = TiedGradient(b, a);
    in->tied_encode = fl.encode_seconds, in->tied_decode = fl.decode_seconds;
    in->tied_fl_wire = fl.wire_seconds, in->tied_fl_latency = fl.latency_seconds;
    in->tied_lf_wire = lf.wire_seconds, in->tied_lf_latency = lf.latency_seconds;
  }
  return true;
}

double CostModel::StepSeconds(const Pipeline& p) const {
  ScheduleInputs in;
  if (!BuildSchedule(p, &in)) return kInfeasible;
  return PlayStep(in, nullptr, false);
}

}  // namespace longhaul::scheduler
