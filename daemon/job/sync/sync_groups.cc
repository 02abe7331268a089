// SetSyncGroups; see sync_groups.h.
#include "daemon/job/sync/sync_groups.h"

#include <algorithm>
#include <cmath>

#include "fleet/consensus_sketch.h"

namespace longhaul::daemon {
namespace {

// The group's consensus distance from its members' sketches of their newest round: each
// replica's sketch is the sum of its members' (their slices are disjoint); a replica some of
// whose members did not report that round is left out, and so is a sketch that is not
// kConsensusSketchSize finite values (a report is a peer's word).
void SetConsensus(const std::map<uint32_t, v1::StepReport>& reports,
                  const std::vector<int>& members, v1::SyncGroupStatus* g,
                  const v1::JobStatus& record) {
  uint64_t newest = 0;  // a round before the report's own step, or none
  for (int member : members) {
    auto it = reports.find(static_cast<uint32_t>(member));
    if (it != reports.end() && it->second.sync().sketch_step() <= it->second.step() + 1) {
      newest = std::max(newest, it->second.sync().sketch_step());
    }
  }
  if (newest == 0) return;
  std::map<uint32_t, std::vector<double>> by_replica;
  std::map<uint32_t, bool> whole;
  for (int member : members) {
    if (member >= record.stages_size()) continue;
    const uint32_t replica = record.stages(member).replica();
    auto it = reports.find(static_cast<uint32_t>(member));
    const v1::SyncReport* s = it == reports.end() ? nullptr : &it->second.sync();
    bool ok = s != nullptr && s->sketch_step() == newest &&
              s->sketch_size() == fleet::kConsensusSketchSize;
    for (int j = 0; ok && j < s->sketch_size(); ++j) ok = std::isfinite(s->sketch(j));
    if (!whole.emplace(replica, ok).second) whole[replica] = whole[replica] && ok;
    if (!ok) continue;
    std::vector<double>& sum = by_replica[replica];
    sum.resize(fleet::kConsensusSketchSize, 0.0);
    for (int j = 0; j < s->sketch_size(); ++j) sum[static_cast<size_t>(j)] += s->sketch(j);
  }
  std::vector<std::vector<double>> sketches;
  for (auto& [replica, sketch] : by_replica) {
    if (whole[replica]) sketches.push_back(std::move(sketch));
  }
  if (sketches.size() < 2) return;
  const double distance = fleet::SketchConsensusDistance(sketches);
  if (!std::isfinite(distance)) return;  // sums too large to square
  g->set_consensus_distance(distance);
  g->set_consensus_step(newest);
}

}  // namespace

void SetSyncGroups(const std::map<uint32_t, v1::StepReport>& reports,
                   const std::vector<std::vector<int>>& groups, bool gossip,
                   v1::JobStatus* record) {
  record->clear_sync_groups();
  for (size_t index = 0; index < groups.size(); ++index) {
    v1::SyncGroupStatus* g = record->add_sync_groups();
    g->set_position(static_cast<uint32_t>(index));
    g->set_reduce(gossip ? "gossip" : record->sync_ring() ? "ring" : "gather");
    bool first = true;
    for (int member : groups[index]) {
      // A replica removed for good is no member any more (a dropped one, which may rejoin, is).
      if (member < record->stages_size() &&
          std::find(record->removed_replicas().begin(), record->removed_replicas().end(),
                    record->stages(member).replica()) == record->removed_replicas().end()) {
        g->add_sites(record->stages(member).site());
      }
      auto it = reports.find(static_cast<uint32_t>(member));
      if (it == reports.end() || !it->second.has_sync()) continue;
      const v1::SyncReport& s = it->second.sync();
      if (g->codec().empty()) g->set_codec(s.codec());
      g->set_raw_bytes(g->raw_bytes() + s.raw_bytes());
      g->set_wire_bytes(g->wire_bytes() + s.wire_bytes());
      g->set_syncs(first ? s.syncs() : std::min(g->syncs(), s.syncs()));
      g->set_exposed_seconds(std::max(g->exposed_seconds(), s.seconds()));
      g->set_hidden_seconds(std::max(g->hidden_seconds(), s.hidden_seconds()));
      g->set_key_frames(g->key_frames() + s.key_frames());
      g->set_frames_skipped(g->frames_skipped() + s.frames_skipped());
      g->set_tied_mends(g->tied_mends() + s.tied_mends());
      first = false;
    }
    if (gossip) SetConsensus(reports, groups[index], g, *record);
  }
}

}  // namespace longhaul::daemon
