// Coordinator: pipeline replicas dropped when one of their sites is lost, and their rejoin
// (sync.on_site_loss: drop, replica_membership.h). A drop stops the attempt and restarts the
// live replicas from the committed step without waiting for the site; a rejoin waits until a
// dropped replica's sites all answer and a later step is committed, stops the attempt there
// and assigns every stage again, the rejoining replicas' stages fetching the state of the
// same stage of a live replica. A replica that fails to rejoin kMaxRejoinFailures times stays
// out for the rest of the job. A gossip job's restarted coordinator adopts the replicas that
// ran on without it and drops the others the same way, stopping no one.
#include <algorithm>

#include "daemon/job/coordinator/coordinator.h"
#include "daemon/job/coordinator/job_record.h"
#include "daemon/job/sync/gossip_round.h"

namespace longhaul::daemon {

ReplicaList Coordinator::RecordDropLocked(const ReplicaList& drop) {
  const ReplicaList dropped = Union(DroppedLocked(), drop);
  // A replica still rejoining keeps fetching its state at the committed step (a live one is
  // left: ReplicasToDrop); one dropped while rejoining failed its rejoin.
  ReplicaList rejoining;
  for (uint32_t r : record_.rejoining_replicas()) {
    if (Contains(dropped, static_cast<int>(r))) {
      ++rejoin_failures_[r];
    } else {
      rejoining.push_back(r);
    }
  }
  *record_.mutable_dropped_replicas() = {dropped.begin(), dropped.end()};
  *record_.mutable_rejoining_replicas() = {rejoining.begin(), rejoining.end()};
  record_.set_replica_drops(record_.replica_drops() + static_cast<uint32_t>(drop.size()));
  return dropped;
}

bool Coordinator::DropReplicas(const std::vector<std::string>& lost, const std::string& problem) {
  ReplicaList drop;
  std::string job_id;
  {
    MutexLock lock(mu_);
    job_id = record_.job_id();
    if (spec_.sync.on_site_loss != fleet::SiteLoss::kDrop) return false;
    const StageGrid grid = GridLocked();
    if (grid.replicas < 2) return false;
    drop = ReplicasToDrop(grid, record_.stages(), DroppedLocked(), RejoiningLocked(), lost);
    if (drop.empty()) return false;
  }
  env_.log->warn("job {}: {}; dropping {}", job_id, problem, ReplicaNames(drop));
  StopAttempt();
  MutexLock lock(mu_);
  if (TerminalState(record_.state())) return true;
  const ReplicaList dropped = RecordDropLocked(drop);
  const StageGrid grid = GridLocked();
  ReplicaList live;
  for (int r = 0; r < grid.replicas; ++r) {
    if (!Contains(dropped, r)) live.push_back(static_cast<uint32_t>(r));
  }
  membership_note_ = ReplicaNames(drop) + " dropped at step " +
                     std::to_string(record_.committed_step()) + " (" + problem + "); " +
                     ReplicaNames(live) + " go on; " + ReplicaNames(dropped) +
                     " rejoin at a later committed step once their sites answer";
  need_assign_ = true;
  AddEventLocked("replica_drop", membership_note_);
  record_.set_state(v1::JOB_STATE_RECOVERING);
  record_.set_detail(membership_note_);
  PersistLocked();
  cv_.notify_all();
  return true;
}

bool Coordinator::AdoptRunningAttempt() {
  v1::JobCommand ping;
  std::vector<std::vector<std::string>> sites;  // by replica
  uint32_t attempt = 0;
  ReplicaList dropped;
  {
    MutexLock lock(mu_);
    if (TerminalState(record_.state()) || spec_.sync.on_site_loss != fleet::SiteLoss::kDrop) {
      return false;
    }
    const StageGrid grid = GridLocked();
    sites.resize(static_cast<size_t>(grid.replicas));
    for (int i = 0; i < grid.size(); ++i) {
      sites[static_cast<size_t>(grid.replica(i))].push_back(record_.stages(i).site());
    }
    attempt = record_.attempt();
    dropped = DroppedLocked();
    ping.set_job_id(record_.job_id());
  }
  ping.set_kind(v1::JobCommand::KIND_PING);
  // A replica goes on when every one of its stages still runs (or finished) this attempt.
  ReplicaList whole, lost;
  uint64_t checkpointed = UINT64_MAX;  // the whole replicas' stages' newest checkpoints, least
  for (size_t r = 0; r < sites.size(); ++r) {
    if (Contains(dropped, static_cast<int>(r))) continue;
    bool all = true;
    uint64_t least = UINT64_MAX;
    for (const std::string& site : sites[r]) {
      const auto p = ControlSite(site, ping);
      all = all && p.ok() && p->attempt() == attempt && (p->running() || p->finished());
      if (!all) break;
      least = std::min<uint64_t>(least, p->checkpoint_step());
    }
    (all ? whole : lost).push_back(static_cast<uint32_t>(r));
    if (all) checkpointed = std::min(checkpointed, least);
  }
  if (whole.empty()) return false;
  // What is left of a lost replica stops. The whole ones go on, told that the lost ones are
  // out of this attempt as a removal is (KIND_REMOVE_REPLICAS: their frames refused, counted
  // gone in the rounds, and with gradient tracking the corrections started again from 0 at
  // the next round, the lost replicas having taken their share of the zero sum with them).
  v1::JobCommand stop;
  stop.set_job_id(ping.job_id());
  stop.set_kind(v1::JobCommand::KIND_STOP_ATTEMPT);
  stop.set_attempt(attempt);
  for (uint32_t r : lost) {
    for (const std::string& site : sites[r]) {
      if (transport::Link* c = env_.channel(site)) (void)c->ControlJob(stop, 3);
    }
  }
  if (!lost.empty()) {
    v1::JobCommand out = stop;
    out.set_kind(v1::JobCommand::KIND_REMOVE_REPLICAS);
    *out.mutable_removed_replicas() = {lost.begin(), lost.end()};
    // A site not told finds them lost by its own pings; only its corrections lag.
    for (uint32_t r : whole) {
      ControlSites(out, sites[r], "tell the stage that " + ReplicaNames(lost) + " dropped out");
    }
  }
  MutexLock lock(mu_);
  if (TerminalState(record_.state())) return true;
  RecordDropLocked(lost);
  membership_note_ =
      "coordinator restarted; " + ReplicaNames(whole) + " went on without it" +
      (lost.empty() ? std::string()
                    : "; " + ReplicaNames(lost) + " dropped at step " +
                          std::to_string(record_.committed_step()) +
                          " (its stages no longer run), rejoining at a later committed step");
  if (!lost.empty()) AddEventLocked("replica_drop", membership_note_);
  attempt_start_ = record_.committed_step();
  // A rejoin restarts every replica from the committed step: not before what they
  // checkpointed while the coordinator was away is committed (their reports, sent again, say).
  rejoin_after_ = checkpointed == UINT64_MAX ? 0 : checkpointed;
  need_assign_ = false;
  record_.set_state(v1::JOB_STATE_RUNNING);
  record_.set_detail(membership_note_);
  PersistLocked();
  cv_.notify_all();
  env_.log->warn("job {}: {}", record_.job_id(), membership_note_);
  return true;
}

bool Coordinator::MayRejoinLocked(uint32_t r, const ReplicaList& removed) const {
  const auto f = rejoin_failures_.find(r);
  return !Contains(removed, static_cast<int>(r)) &&
         (f == rejoin_failures_.end() || f->second < kMaxRejoinFailures);
}

void Coordinator::MaybeRejoin() {
  std::vector<std::pair<uint32_t, std::vector<std::string>>> candidates;  // replica, its sites
  v1::JobCommand ping;
  uint64_t at = 0;
  {
    MutexLock lock(mu_);
    at = record_.committed_step();
    if (record_.dropped_replicas().empty() || TerminalState(record_.state()) ||
        at == last_rejoin_try_ || at < rejoin_after_ ||
        !RejoinDue(at, attempt_start_, record_.total_steps())) {
      return;
    }
    last_rejoin_try_ = at;  // one try per committed step
    const StageGrid grid = GridLocked();
    const ReplicaList removed = RemovedLocked();
    for (uint32_t r : record_.dropped_replicas()) {
      if (!MayRejoinLocked(r, removed)) continue;
      std::vector<std::string> sites;
      for (int p = 0; p < grid.stages(static_cast<int>(r)); ++p) {
        sites.push_back(record_.stages(grid.flat(static_cast<int>(r), p)).site());
      }
      candidates.emplace_back(r, std::move(sites));
    }
    ping.set_job_id(record_.job_id());
  }
  ping.set_kind(v1::JobCommand::KIND_PING);
  ReplicaList back;  // the dropped replicas whose sites all answer
  for (const auto& [replica, sites] : candidates) {
    bool all = true;
    for (const auto& site : sites) {
      transport::Link* c = env_.channel(site);
      all = all && c != nullptr && c->ControlJob(ping, 2).ok();
      if (!all) break;
    }
    if (all) back.push_back(replica);
  }
  if (back.empty()) return;
  StopAttempt();
  {
    MutexLock lock(mu_);
    if (TerminalState(record_.state())) return;
    // The stages are stopped: the committed step no longer moves. The attempt restarts from
    // it either way, with the replicas that came back rejoining.
    ReplicaList dropped;
    for (uint32_t r : record_.dropped_replicas()) {
      if (!Contains(back, static_cast<int>(r))) dropped.push_back(r);
    }
    if (!RejoinDue(record_.committed_step(), attempt_start_, record_.total_steps())) {
      need_assign_ = true;  // the job reached its end meanwhile: no rejoin, just resume
      return;
    }
    *record_.mutable_dropped_replicas() = {dropped.begin(), dropped.end()};
    const ReplicaList rejoining = Union(RejoiningLocked(), back);
    *record_.mutable_rejoining_replicas() = {rejoining.begin(), rejoining.end()};
    record_.set_replica_rejoins(record_.replica_rejoins() + static_cast<uint32_t>(back.size()));
    const int source = RejoinSource(GridLocked(), dropped, rejoining);
    membership_note_ = ReplicaNames(back) + " rejoined at step " +
                       std::to_string(record_.committed_step()) + " from replica " +
                       std::to_string(source) + "'s state";
    RestartFromCommittedLocked("replica_rejoin", membership_note_);
    record_.set_detail(membership_note_);
    PersistLocked();
    cv_.notify_all();
    env_.log->warn("job {}: {}", record_.job_id(), membership_note_);
  }
  AssignAll();
}

void Coordinator::MaybeRefreshGossipLinks() {
  v1::JobCommand command;
  std::vector<std::string> sites;  // the live stages', by stage
  {
    MutexLock lock(mu_);
    if (spec_.sync.reduce != fleet::SyncReduce::kGossip ||
        record_.state() != v1::JOB_STATE_RUNNING || leaving_ || adopt_ ||
        record_.joining_sites_size() > 0 || record_.leaving_sites_size() > 0) {
      return;
    }
    const double now = env_.file_env->NowSeconds();
    if (now - links_checked_ < env_.gossip_links_check_seconds) return;
    links_checked_ = now;
    const StageGrid grid = GridLocked();
    if (grid.replicas < 2) return;
    const std::vector<double> links = GossipLinksLocked(grid);
    const std::vector<double> current(record_.gossip_links().begin(), record_.gossip_links().end());
    if (links.empty() || !GossipLinksMoved(current, links)) return;
    for (int i : LiveStages(grid, DroppedLocked())) sites.push_back(record_.stages(i).site());
    command.set_job_id(record_.job_id());
    command.set_attempt(record_.attempt());
    command.set_links_epoch(record_.gossip_links_epoch() + 1);
    *command.mutable_gossip_links() = {links.begin(), links.end()};
  }
  // The furthest stage's steps (each site is asked: the replicas step at their own pace), and
  // the round kGossipLinksLead past its next.
  v1::JobCommand ping;
  ping.set_job_id(command.job_id());
  ping.set_kind(v1::JobCommand::KIND_PING);
  ping.set_attempt(command.attempt());
  uint64_t furthest = 0;
  const double asked = env_.file_env->NowSeconds();
  for (const auto& site : sites) {
    auto r = ControlSite(site, ping);
    if (!r.ok() || !r->running() || r->attempt() != command.attempt()) return;  // not healthy
    furthest = std::max(furthest, r->step());
  }
  // The stages go on meanwhile: telling them all takes about as long as asking them did, so
  // where that is more than a round or two (many sites over slow links) the lead grows by it.
  uint64_t lead = kGossipLinksLeadRounds;
  {
    MutexLock lock(mu_);
    const double round = record_.step_seconds() * std::max(1, spec_.sync.every);
    const double asking = env_.file_env->NowSeconds() - asked;
    if (round > 0) lead += static_cast<uint64_t>(std::min(1e6, 2 * asking / round));
  }
  command.set_from_round(GossipRoundOf(spec_.sync, furthest) + lead);
  command.set_kind(v1::JobCommand::KIND_GOSSIP_LINKS);
  std::string refused;
  for (const auto& site : sites) {
    if (auto r = ControlSite(site, command); !r.ok() && refused.empty()) {
      refused = "site '" + site + "': " + std::string(r.status().message());
    }
  }
  const std::vector<double> links(command.gossip_links().begin(), command.gossip_links().end());
  if (refused.empty()) {
    MutexLock lock(mu_);
    if (record_.attempt() != command.attempt()) return;  // restarted meanwhile: its own links
    *record_.mutable_gossip_links() = command.gossip_links();
    record_.set_gossip_links_epoch(command.links_epoch());
    record_.set_gossip_links_from_round(command.from_round());
    AddEventLocked("gossip_links", "the links' rates moved: gossip rounds from " +
                                       std::to_string(command.from_round()) +
                                       " on draw from links epoch " +
                                       std::to_string(command.links_epoch()) +
                                       " (Mbit/s: " + GossipLinksDebugString(links) + ")");
    PersistLocked();
    env_.log->info("job {}: gossip rounds from {} on draw from links epoch {} (Mbit/s): {}",
                   job_id_, command.from_round(), command.links_epoch(),
                   GossipLinksDebugString(links));
    return;
  }
  // Some stage mixes by the old matrix past that round and the others by the new: a new
  // attempt from the committed step, which draws from the new one (AssignAll).
  StopAttempt();
  {
    MutexLock lock(mu_);
    if (TerminalState(record_.state()) || record_.attempt() != command.attempt()) return;
    const std::string note = "the links' rates moved, but " + refused + ": attempt " +
                             std::to_string(record_.attempt() + 1) + " resumes from step " +
                             std::to_string(record_.committed_step()) + " with the new links";
    RestartFromCommittedLocked("rollback", note);
    record_.set_detail(note);
    PersistLocked();
    cv_.notify_all();
    env_.log->warn("job {}: {}", job_id_, note);
  }
  AssignAll();
}

}  // namespace longhaul::daemon
