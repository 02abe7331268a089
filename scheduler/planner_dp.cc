// The planner's surrogate and its two dynamic programs (see planner_dp.h).
#include "scheduler/planner_dp.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <tuple>

namespace longhaul::scheduler::internal {
namespace {

// One tensor's transfer, as the surrogate needs it.
struct Tx {
  double wire = 0, latency = 0, encode = 0, decode = 0;
};

Tx ToTx(const TransferCost& t) {
  return {t.wire_seconds, t.latency_seconds, t.encode_seconds, t.decode_seconds};
}

// A suffix of the pipeline: its first stage is (site, n); `parent` is the suffix after it.
struct Label {
  double P = 0;       // steady period so far
  double R = 0;       // round trip of one microbatch from the suffix's first stage
  double cfirst = 0;  // cycle (compute + codecs) of the suffix's first stage
  int last = 0;       // site of the last stage
  int site = 0, n = 0, cnt = 0;
  int parent = -1;  // arena index
};

class Surrogate {
 public:
  explicit Surrogate(const CostModel& m) : m_(m), M_(m.microbatches()), L_(m.num_layers()) {}

  double Cycle(int s, int n, bool last) const {
    return m_.Forward(s, n, last) + m_.Backward(s, n, last);
  }
  // `wide`: the cut after the subspace-cut variant's first unconstrained layer carries C
  // floats per position, the others K (CostModel::WideCut); suffix_layers: the layers after
  // the cut, which the suffix DPs know.
  bool Wide(int suffix_layers) const { return m_.WideCut(L_ - suffix_layers); }
  Tx Act(int from, int to, int n_from, bool wide) const {
    return ToTx(m_.Activation(from, to, m_.Budget(from, n_from, false), wide));
  }
  Tx Grad(int from, int to, int n_from, bool from_last, bool wide) const {
    return ToTx(m_.Gradient(from, to, m_.Budget(from, n_from, from_last), wide));
  }

  // The last stage on its own.
  Label Start(int s, int n) const {
    const double c = Cycle(s, n, true);
    return {c, c, c, s, s, n, 1, -1};
  }
  // Stage (s, n) in front of suffix x, with the link priced as a (activations) and g.
  Label Extend(const Label& x, int s, int n, const Tx& a, const Tx& g, int parent) const {
    Label y;
    y.site = s, y.n = n, y.cnt = x.cnt + 1, y.last = x.last, y.parent = parent;
    const double c_new = Cycle(s, n, false) + a.encode + g.decode;
    const double c_next = x.cfirst + a.decode + g.encode;
    y.cfirst = c_new;
    y.R = x.R + c_new + a.decode + g.encode + a.wire + a.latency + g.wire + g.latency;
    y.P = std::max({x.P, c_new, c_next, a.wire, g.wire, y.R / y.cnt});
    return y;
  }
  // The whole step once y's first stage is the pipeline's first.
  double Complete(const Label& y) const {
    return (M_ - 1) * y.P + y.R + m_.Optimizer(y.site, y.n, true, y.cnt == 1) + Release(y.site) +
           Tail(y.site, y.last, y.cnt);
  }
  double Release(int first) const {
    return m_.coordinator() >= 0 ? m_.HalfRtt(m_.coordinator(), first) : 0;
  }
  double Report(int site, int first) const {
    return m_.HalfRtt(site, m_.coordinator() >= 0 ? m_.coordinator() : first);
  }
  // Tied exchange and the end stages' reports, after the first stage's last backward.
  double Tail(int first, int last, int stages) const {
    if (stages == 1) return Report(first, first);
    if (!m_.TiedExchange()) return std::max(Report(first, first), Report(last, first));
    const TransferCost fl = m_.TiedGradient(first, last);
    const double to_last = fl.encode_seconds + fl.wire_seconds + fl.latency_seconds +
                           fl.decode_seconds + Report(last, first);
    return std::max(to_last, fl.encode_seconds + fl.decode_seconds + Report(first, first));
  }
  bool Fits(int s, int n, bool first, bool last, int cnt) const {
    return m_.Fits(s, n, first, last, std::min(M_, cnt));
  }
  int M() const { return M_; }
  int L() const { return L_; }

 private:
  const CostModel& m_;
  int M_, L_;
};

// Small Pareto sets of labels per state; labels live in an arena so parents stay valid.
class LabelStore {
 public:
  LabelStore(const Surrogate& sur, int num_sites, const std::vector<int>& lasts, const DpOptions& o)
      : sur_(sur), options_(o), n_(num_sites), tail_gap_(static_cast<size_t>(n_) * n_, 0) {
    // tail_gap_[a * n + b] = max over first sites f of Tail(f, a) - Tail(f, b).
    for (int a : lasts) {
      for (int b : lasts) {
        double gap = 0;
        for (int f : lasts) {
          if (f == a || f == b || a == b) continue;
          gap = std::max(gap, sur.Tail(f, a, 2) - sur.Tail(f, b, 2));
        }
        tail_gap_[static_cast<size_t>(a) * n_ + b] = gap;
      }
    }
  }
  std::vector<Label> arena;

  // Adds y to `set` unless a label there dominates it; drops labels y dominates.
  void Insert(std::vector<int>* set, const Label& y) {
    for (int i : *set) {
      if (Dominates(arena[i], y)) return;
    }
    std::erase_if(*set, [&](int i) { return Dominates(y, arena[i]); });
    if (static_cast<int>(set->size()) >= options_.max_labels) {
      auto worst = std::max_element(set->begin(), set->end(),
                                    [&](int a, int b) { return Key(arena[a]) < Key(arena[b]); });
      if (Key(arena[*worst]) <= Key(y)) return;
      *worst = Add(y);
      return;
    }
    set->push_back(Add(y));
  }
  // A lower bound of any step completed from x.
  double Bound(const Label& x) const { return (sur_.M() - 1) * x.P + x.R; }

 private:
  double Key(const Label& x) const { return Bound(x); }
  int Add(const Label& y) {
    arena.push_back(y);
    return static_cast<int>(arena.size()) - 1;
  }
  bool Dominates(const Label& a, const Label& b) const {
    if (a.P > b.P || a.cfirst > b.cfirst) return false;
    const double gap = tail_gap_[static_cast<size_t>(a.last) * n_ + b.last];
    return a.R + gap <= b.R;
  }
  const Surrogate& sur_;
  DpOptions options_;
  int n_;
  std::vector<double> tail_gap_;
};

// Best completed pipeline per (stages, first site, last site), and the best few overall.
class Completions {
 public:
  static constexpr size_t kTop = 8;
  void Offer(double t, int arena_index, const Label& y) {
    best_ = std::min(best_, t);
    auto key = std::make_tuple(y.cnt, y.site, y.last);
    auto it = found_.find(key);
    if (it == found_.end() || t < it->second.first) found_[key] = {t, arena_index};
    top_.push_back({t, arena_index});
    std::sort(top_.begin(), top_.end());
    if (top_.size() > kTop) top_.pop_back();
  }
  double best() const { return best_; }
  std::vector<DpCandidate> Take(const std::vector<Label>& arena) const {
    std::vector<std::pair<double, int>> all = top_;
    for (const auto& [key, found] : found_) all.push_back(found);
    std::sort(all.begin(), all.end());
    std::vector<DpCandidate> out;
    for (const auto& [t, index] : all) {
      DpCandidate c;
      c.surrogate_seconds = t;
      for (int i = index; i >= 0; i = arena[i].parent) {
        c.pipeline.sites.push_back(arena[i].site);
        c.pipeline.layers.push_back(arena[i].n);
      }
      if (out.empty() || !(out.back().pipeline == c.pipeline)) out.push_back(std::move(c));
    }
    return out;
  }

 private:
  double best_ = kInfeasible;
  std::map<std::tuple<int, int, int>, std::pair<double, int>> found_;
  std::vector<std::pair<double, int>> top_;
};

}  // namespace

std::vector<DpCandidate> SolveAnyOrder(const CostModel& model, const std::vector<int>& cand,
                                       const DpOptions& options) {
  const Surrogate sur(model);
  const int N = static_cast<int>(cand.size()), L = sur.L();
  if (N == 0 || N > 16) return {};
  LabelStore store(sur, model.num_sites(), cand, options);
  Completions done;
  // Link prices by candidate position and the cut's width: act[((a * N + b) * (L + 1) + n) *
  // 2 + wide], grad likewise with the sender's "is last" flag last.
  std::vector<Tx> act(static_cast<size_t>(N) * N * (L + 1) * 2), grad(act.size() * 2);
  for (int a = 0; a < N; ++a) {
    for (int b = 0; b < N; ++b) {
      if (a == b || !model.HasLink(cand[a], cand[b]) || !model.HasLink(cand[b], cand[a])) continue;
      for (int n = 1; n <= L; ++n) {
        for (int wide = 0; wide < 2; ++wide) {
          const size_t k = ((static_cast<size_t>(a) * N + b) * (L + 1) + n) * 2 + wide;
          act[k] = sur.Act(cand[a], cand[b], n, wide);
          grad[2 * k] = sur.Grad(cand[a], cand[b], n, false, wide);
          grad[2 * k + 1] = sur.Grad(cand[a], cand[b], n, true, wide);
        }
      }
    }
  }
  auto linked = [&](int a, int b) {
    return model.HasLink(cand[a], cand[b]) && model.HasLink(cand[b], cand[a]);
  };
  // table[mask][first * (L + 1) + layers]: suffixes using `mask`, starting at `first`.
  std::vector<std::vector<std::vector<int>>> table(static_cast<size_t>(1) << N);
  auto at = [&](uint32_t mask, int first, int layers) -> std::vector<int>& {
    auto& v = table[mask];
    if (v.empty()) v.resize(static_cast<size_t>(N) * (L + 1));
    return v[static_cast<size_t>(first) * (L + 1) + layers];
  };
  for (int a = 0; a < N; ++a) {
    for (int n = 1; n <= L; ++n) {
      if (!sur.Fits(cand[a], n, n == L, true, 1)) break;
      Label y = sur.Start(cand[a], n);
      if (n == L) {
        if (!options.allow_subsets && N > 1) break;
        store.arena.push_back(y);
        done.Offer(sur.Complete(y), static_cast<int>(store.arena.size()) - 1, y);
      } else {
        store.Insert(&at(1u << a, a, n), y);
      }
    }
  }
  const uint32_t full = (1u << N) - 1;
  for (int l = 1; l < L; ++l) {
    for (uint32_t mask = 1; mask <= full; ++mask) {
      if (table[mask].empty() || std::popcount(mask) > l) continue;
      for (int b = 0; b < N; ++b) {
        if (!(mask & (1u << b))) continue;
        const std::vector<int> labels = at(mask, b, l);
        for (int xi : labels) {
          const Label x = store.arena[xi];
          const double bound = done.best() * (1 + options.slack);
          if (store.Bound(x) > bound) continue;
          for (int a = 0; a < N; ++a) {
            if ((mask & (1u << a)) || !linked(a, b)) continue;
            const uint32_t next = mask | (1u << a);
            for (int n = 1; l + n <= L; ++n) {
              const bool first = l + n == L;
              if (!options.allow_subsets && first && next != full) continue;
              if (!first && next == full) continue;  // no site left for the front
              if (!sur.Fits(cand[a], n, first, false, x.cnt + 1)) break;
              const size_t wide = sur.Wide(l);
              const size_t ka = ((static_cast<size_t>(a) * N + b) * (L + 1) + n) * 2 + wide;
              const size_t kg =
                  (((static_cast<size_t>(b) * N + a) * (L + 1) + x.n) * 2 + wide) * 2 +
                  (x.cnt == 1);
              // Compute alone grows with n: once it breaks the bound, larger n does too.
              const double cycle = sur.Cycle(cand[a], n, false);
              if ((sur.M() - 1) * std::max(x.P, cycle) + x.R + cycle > bound) break;
              const Label y = sur.Extend(x, cand[a], n, act[ka], grad[kg], xi);
              if (store.Bound(y) > bound) continue;
              if (first) {
                store.arena.push_back(y);
                done.Offer(sur.Complete(y), static_cast<int>(store.arena.size()) - 1, y);
              } else {
                store.Insert(&at(next, a, l + n), y);
              }
            }
          }
        }
      }
    }
  }
  return done.Take(store.arena);
}

std::vector<DpCandidate> SolveInOrder(const CostModel& model, const std::vector<int>& order,
                                      const DpOptions& options) {
  const Surrogate sur(model);
  const int S = static_cast<int>(order.size()), L = sur.L();
  if (S == 0 || S > L) return {};
  for (int i = 0; i + 1 < S; ++i) {
    if (!model.HasLink(order[i], order[i + 1]) || !model.HasLink(order[i + 1], order[i])) return {};
  }
  LabelStore store(sur, model.num_sites(), {order.back()}, options);
  Completions done;
  // sets[i * (L + 1) + layers]: suffixes starting at stage i covering `layers` layers.
  std::vector<std::vector<int>> sets(static_cast<size_t>(S) * (L + 1));
  for (int n = 1; n + (S - 1) <= L; ++n) {
    if (!sur.Fits(order[S - 1], n, S == 1, true, 1)) break;
    const Label y = sur.Start(order[S - 1], n);
    if (S == 1) {
      if (n == L) {
        store.arena.push_back(y);
        done.Offer(sur.Complete(y), 0, y);
      }
      continue;
    }
    store.Insert(&sets[static_cast<size_t>(S - 1) * (L + 1) + n], y);
  }
  for (int i = S - 2; i >= 0; --i) {
    const int a = order[i], b = order[i + 1];
    // By the cut's width (index 0 narrow, 1 wide) and the sender's layers.
    std::vector<Tx> act[2], grad[2];
    for (int wide = 0; wide < 2; ++wide) {
      act[wide].resize(L + 1);
      grad[wide].resize(2 * (L + 1));
      for (int n = 1; n <= L; ++n) {
        act[wide][n] = sur.Act(a, b, n, wide);
        grad[wide][2 * n] = sur.Grad(b, a, n, false, wide);
        grad[wide][2 * n + 1] = sur.Grad(b, a, n, true, wide);
      }
    }
    for (int l = S - 1 - i; l < L; ++l) {
      const int wide = sur.Wide(l);
      const std::vector<int> labels = sets[static_cast<size_t>(i + 1) * (L + 1) + l];
      for (int xi : labels) {
        const Label x = store.arena[xi];
        const double bound = done.best() * (1 + options.slack);
        if (store.Bound(x) > bound) continue;
        for (int n = 1; l + n + i <= L; ++n) {
          const bool first = i == 0;
          if (first && l + n != L) continue;
          if (!sur.Fits(a, n, first, false, x.cnt + 1)) break;
          const double cycle = sur.Cycle(a, n, false);
          if ((sur.M() - 1) * std::max(x.P, cycle) + x.R + cycle > bound) break;
          const Label y = sur.Extend(x, a, n, act[wide][n], grad[wide][2 * x.n + (x.cnt == 1)], xi);
          if (store.Bound(y) > bound) continue;
          if (first) {
            store.arena.push_back(y);
            done.Offer(sur.Complete(y), static_cast<int>(store.arena.size()) - 1, y);
          } else {
            store.Insert(&sets[static_cast<size_t>(i) * (L + 1) + l + n], y);
          }
        }
      }
    }
  }
  return done.Take(store.arena);
}

double SurrogateSeconds(const CostModel& model, const Pipeline& p) {
  const Surrogate sur(model);
  const int S = static_cast<int>(p.sites.size());
  if (S == 0) return kInfeasible;
  if (!sur.Fits(p.sites[S - 1], p.layers[S - 1], S == 1, true, 1)) return kInfeasible;
  Label x = sur.Start(p.sites[S - 1], p.layers[S - 1]);
  int suffix = p.layers[S - 1];  // layers after the cut in front of stage i + 1
  for (int i = S - 2; i >= 0; --i) {
    const int a = p.sites[i], b = p.sites[i + 1];
    if (!sur.Fits(a, p.layers[i], i == 0, false, S - i)) return kInfeasible;
    const bool wide = sur.Wide(suffix);
    x = sur.Extend(x, a, p.layers[i], sur.Act(a, b, p.layers[i], wide),
                   sur.Grad(b, a, p.layers[i + 1], i + 1 == S - 1, wide), -1);
    suffix += p.layers[i];
  }
  return sur.Complete(x);
}

}  // namespace longhaul::scheduler::internal
