// SetSyncGroups; see sync_groups.h.
#include "daemon/job/sync/sync_groups.h"

#include <algorithm>

namespace longhaul::daemon {

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
      if (member < record->stages_size()) g->add_sites(record->stages(member).site());
      auto it = reports.find(static_cast<uint32_t>(member));
      if (it == reports.end() || !it->second.has_sync()) continue;
      const v1::SyncReport& s = it->second.sync();
      if (g->codec().empty()) g->set_codec(s.codec());
      g->set_raw_bytes(g->raw_bytes() + s.raw_bytes());
      g->set_wire_bytes(g->wire_bytes() + s.wire_bytes());
      g->set_syncs(first ? s.syncs() : std::min(g->syncs(), s.syncs()));
      g->set_exposed_seconds(std::max(g->exposed_seconds(), s.seconds()));
      g->set_hidden_seconds(std::max(g->hidden_seconds(), s.hidden_seconds()));
      first = false;
    }
  }
}

}  // namespace longhaul::daemon
