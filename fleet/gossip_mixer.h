// Sparse push-sum over the parameters of N replicas: the step `sync: {reduce: gossip}` takes in
// the fleet simulator (local_fleet.h), where gossip.h has the arithmetic on small vectors.
//
// Each replica r holds its parameters x_r and, per parameter, a push-sum weight w_r (1 at the
// start): its push-sum value is v_r = w_r x_r, so what local steps move is new mass at r. In a
// round over a graph (gossip.h: ChooseGossipGraph) each sender j picks, per parameter slice, a
// fraction `keep` of the slice (every coordinate when keep is 1): half of them a window that
// turns with the rounds, the same on every replica (so each coordinate is mixed every 1 / (keep
// / 2) rounds, and replicas whose values differ where none moves still come together), the
// other half the coordinates that moved most since it last sent them (the largest
// |x_j - ref_j|: what local steps learned spreads first); for each of those it keeps
// one share 1 / (1 + d_j) of (v, w) and sends one share to each of its d_j out-neighbours; the
// coordinates it does not pick it keeps whole. A receiver adds what it gets, in sender order,
// and its parameter is v / w. Per coordinate the mixing is column stochastic (the sparsified
// push-sum of Chen, Hashemi and Vikalo's seed: the weights follow the values, so dropping a
// coordinate from a message does not bias the average), so for every coordinate the sums over
// replicas of v and of w never change in a round: a round moves mass, never makes or loses it.
// (A local step's move counts as mass at r weighted by its w there, which rounds keep near 1.)
//
// Each replica's side of the round is a GossipNode (gossip_node.h), the code a daemon's stage
// runs: every sender's frames are encoded and decoded as they would cross a link (per picked
// coordinate its index, value and weight, fp32 each: 12 bytes, or 8 when a frame carries the
// whole slice, after a 16-byte header per slice), and each receiver applies them in sender
// order. With tracking (gossip_node.h) every frame carries the sender's drifts too (4 bytes more
// a coordinate), and each local step applies the replica's correction (Correct).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "fleet/gossip.h"
#include "fleet/gossip_node.h"
#include "fleet/sync_slices.h"

namespace longhaul::fleet {

// What the fleet simulator asks of a gossip sync, whichever frames its rounds send: this file's
// fp32 shares (GossipMixer) or each link's compressed differences (gossip_links.h); the daemons
// run the same nodes on the same frames.
class GossipRounds {
 public:
  virtual ~GossipRounds() = default;
  // Every replica starts at `params` (the common initial parameters).
  virtual void Reset(std::span<const float> params) = 0;
  virtual bool tracking() const = 0;
  // Tracking: replica r's local step with learning rate `lr` has moved `x` (the whole
  // parameter array); its correction moves it on.
  virtual void Correct(int r, std::span<float> x, double lr) = 0;
  // One round over `graph` (graph.nodes() == replicas) on `params[r]`, in place. Returns the
  // bytes the round's frames put on the links, or a frame's error.
  virtual StatusOr<uint64_t> Round(const GossipGraph& graph,
                                   std::vector<std::vector<float>>* params) = 0;
  // The exact average at the job's end: every replica's parameters become the push-sum
  // average (the caller counts the all-gather).
  virtual Status Average(std::vector<std::vector<float>>* params) = 0;
};

class GossipMixer : public GossipRounds {
 public:
  // `replicas` replicas of `parameters` parameters cut into `slices` (covering them);
  // `keep` in (0, 1]: the fraction of each slice a sender picks; `tracking`: gradient tracking.
  GossipMixer(int replicas, size_t parameters, std::vector<SyncSlice> slices, double keep,
              bool tracking = false, const OuterOptions& outer = kPlainAveraging);

  // Starts every replica's reference at `params` (the common initial parameters).
  void Reset(std::span<const float> params) override;

  bool tracking() const override { return nodes_[0].tracking(); }
  const std::vector<float>& corrections(int r) const {
    return nodes_[static_cast<size_t>(r)].corrections();
  }
  // Tracking: replica r's local step with learning rate `lr` has moved `x`; its correction
  // moves it on (GossipNode::Correct).
  void Correct(int r, std::span<float> x, double lr) override {
    nodes_[static_cast<size_t>(r)].Correct(x, lr);
  }

  // One round over `graph` (graph.nodes() == replicas) on `params[r]` (each `parameters`
  // long), in place. Returns the bytes the round's frames put on the links, or a frame's
  // error (a parameter that is not finite: what a daemon would refuse from a peer).
  StatusOr<uint64_t> Round(const GossipGraph& graph,
                           std::vector<std::vector<float>>* params) override;

  // The exact average: every replica's parameters become sum_r v_r / sum_r w_r per
  // coordinate and every weight 1 (the job's end: one all-gather of the parameters, which
  // the caller counts).
  Status Average(std::vector<std::vector<float>>* params) override;

  // The coordinates a sender picks of a slice of `size` (at least 1).
  size_t Picked(size_t size) const { return nodes_[0].Picked(size); }

  const std::vector<float>& weights(int r) const {
    return nodes_[static_cast<size_t>(r)].weights();
  }

 private:
  std::vector<GossipNode> nodes_;  // by replica
  uint64_t rounds_ = 0;
};

}  // namespace longhaul::fleet
