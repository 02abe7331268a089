// SetDataSources; see data_sources.h.
#include "daemon/job/coordinator/data_sources.h"

#include <vector>

namespace longhaul::daemon {

void SetDataSources(const std::map<uint32_t, v1::StepReport>& reports, const StageGrid& grid,
                    const model::Job& job, v1::JobStatus* record) {
  const size_t parts = job.data.mixture.empty() ? 1 : job.data.mixture.size();
  std::vector<uint64_t> windows(parts, 0);
  bool any = false;
  for (const auto& [stage, r] : reports) {
    if (static_cast<int>(stage) >= grid.size() || !grid.first(static_cast<int>(stage))) continue;
    if (static_cast<size_t>(r.source_windows_size()) != parts) continue;
    for (size_t i = 0; i < parts; ++i) windows[i] += r.source_windows(static_cast<int>(i));
    any = true;
  }
  if (!any) return;
  record->clear_data_sources();
  for (size_t i = 0; i < parts; ++i) {
    v1::DataSourceCount* d = record->add_data_sources();
    d->set_name(job.data.mixture.empty() ? job.data.train : job.data.mixture[i].manifest);
    d->set_weight(job.data.mixture.empty() ? 1.0 : job.data.mixture[i].weight);
    d->set_tokens(windows[i] * static_cast<uint64_t>(job.seq_len));
  }
}

}  // namespace longhaul::daemon
