// Coordinator: pipeline replicas dropped when one of their sites is lost, and their rejoin
// (sync.on_site_loss: drop, replica_membership.h). A drop stops the attempt and restarts the
// live replicas from the committed step without waiting for the site; a rejoin waits for a
// committed sync step (every live replica then holds the outer step's anchor), stops the
// attempt there and assigns every stage again, the rejoining replicas' stages fetching the
// state of the same stage of a live replica.
#include <algorithm>

#include "daemon/job/coordinator.h"
#include "daemon/job/job_record.h"

namespace longhaul::daemon {
namespace {

std::string ReplicaNames(const ReplicaList& replicas) {
  std::string s = replicas.size() == 1 ? "replica " : "replicas ";
  for (size_t i = 0; i < replicas.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(replicas[i]);
  }
  return s;
}

}  // namespace

bool Coordinator::DropReplicas(const std::vector<std::string>& lost, const std::string& problem) {
  ReplicaList drop, live;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (spec_.sync.mode != fleet::SyncMode::kLocal ||
        spec_.sync.on_site_loss != fleet::SiteLoss::kDrop) {
      return false;
    }
    const StageGrid grid = StageGrid::OfPlan(spec_.replicas, record_.stages());
    if (grid.replicas < 2) return false;
    drop = ReplicasToDrop(grid, record_.stages(), DroppedLocked(), lost);
    if (drop.empty()) return false;
    for (int r = 0; r < grid.replicas; ++r) {
      if (!Contains(drop, r) && !Contains(DroppedLocked(), r)) live.push_back(r);
    }
  }
  env_.log->warn("job {}: {}; dropping {}", record_.job_id(), problem, ReplicaNames(drop));
  StopAttempt();
  std::lock_guard<std::mutex> lock(mu_);
  if (TerminalState(record_.state())) return true;
  ReplicaList dropped = DroppedLocked();
  dropped.insert(dropped.end(), drop.begin(), drop.end());
  std::sort(dropped.begin(), dropped.end());
  *record_.mutable_dropped_replicas() = {dropped.begin(), dropped.end()};
  record_.set_replica_drops(record_.replica_drops() + static_cast<uint32_t>(drop.size()));
  // A replica still rejoining keeps fetching its state at the committed step, unless it was
  // dropped itself or no live replica is left to fetch from.
  ReplicaList rejoining;
  for (uint32_t r : record_.rejoining_replicas()) {
    if (!Contains(dropped, static_cast<int>(r))) rejoining.push_back(r);
  }
  if (RejoinSource(StageGrid::OfPlan(spec_.replicas, record_.stages()).replicas, dropped,
                   rejoining) < 0) {
    rejoining.clear();
  }
  *record_.mutable_rejoining_replicas() = {rejoining.begin(), rejoining.end()};
  need_assign_ = true;
  record_.set_state(v1::JOB_STATE_RECOVERING);
  membership_note_ = ReplicaNames(drop) + " dropped at step " +
                     std::to_string(record_.committed_step()) + " (" + problem + "); " +
                     ReplicaNames(live) + " go on; " + ReplicaNames(dropped) +
                     " rejoin at a committed sync step once their sites answer";
  record_.set_detail(membership_note_);
  PersistLocked();
  cv_.notify_all();
  return true;
}

void Coordinator::MaybeRejoin() {
  ReplicaList dropped;
  std::vector<std::string> sites;
  v1::JobCommand ping;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped = DroppedLocked();
    const uint64_t committed = record_.committed_step();
    if (dropped.empty() || TerminalState(record_.state()) || committed == last_rejoin_try_ ||
        !RejoinDue(committed, attempt_start_, spec_.sync.every, record_.total_steps())) {
      return;
    }
    last_rejoin_try_ = committed;  // one try per committed step
    const StageGrid grid = StageGrid::OfPlan(spec_.replicas, record_.stages());
    for (int i = 0; i < grid.size(); ++i) {
      if (Contains(dropped, grid.replica(i))) sites.push_back(record_.stages(i).site());
    }
    ping.set_job_id(record_.job_id());
  }
  ping.set_kind(v1::JobCommand::KIND_PING);
  for (const auto& site : sites) {
    transport::Link* c = env_.channel(site);
    if (!c || !c->ControlJob(ping, 2).ok()) return;  // not back yet
  }
  StopAttempt();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (TerminalState(record_.state()) || need_assign_) return;
    *record_.mutable_rejoining_replicas() = {dropped.begin(), dropped.end()};
    record_.clear_dropped_replicas();
    record_.set_replica_rejoins(record_.replica_rejoins() + static_cast<uint32_t>(dropped.size()));
    record_.set_attempt(record_.attempt() + 1);
    const uint64_t keep = record_.committed_step() - record_.losses_offset();
    while (static_cast<uint64_t>(record_.losses_size()) > keep) {
      record_.mutable_losses()->RemoveLast();
    }
    record_.set_step(record_.committed_step());
    membership_note_ =
        ReplicaNames(dropped) + " rejoined at step " + std::to_string(record_.committed_step()) +
        " from replica " +
        std::to_string(RejoinSource(StageGrid::OfPlan(spec_.replicas, record_.stages()).replicas,
                                    {}, dropped)) +
        "'s state";
    record_.set_detail(membership_note_);
    PersistLocked();
    cv_.notify_all();
    env_.log->warn("job {}: {}", record_.job_id(), membership_note_);
  }
  AssignAll();
}

}  // namespace longhaul::daemon
