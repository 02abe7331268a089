// A job's data sources as its status shows them (v1::DataSourceCount): per source of
// data.train (each manifest of a mixture, with its weight; or the one file) the tokens the
// live replicas' first stages have trained on, from their latest step reports.
#pragma once

#include <cstdint>
#include <map>

#include "daemon/job/spec/stage_grid.h"
#include "model/job.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

// Replaces record->data_sources from the first stages among `reports`. A report whose
// source_windows does not have one entry per source is ignored (not trusted to index).
void SetDataSources(const std::map<uint32_t, v1::StepReport>& reports, const StageGrid& grid,
                    const model::Job& job, v1::JobStatus* record);

}  // namespace longhaul::daemon
