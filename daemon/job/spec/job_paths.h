// Confinement of a job's files: the data a job trains on (data.train, data.val) and the
// checkpoint it starts from (init_from) must lie inside the site's data_roots (site config).
// Without this, a job could make every stage site read any file its daemon can (a job with
// `data: {train: /etc/shadow, format: text}` trained on it). Paths are compared after
// resolving symlinks and "..", so a link inside a root that points out of it is refused too.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/job/spec/job_spec.h"

namespace longhaul::daemon {

// OK if every file `spec` names lies under one of `roots`; otherwise PermissionDenied naming
// the job key, the path and the roots. "builtin" data names no file.
Status CheckJobPaths(const JobSpec& spec, const std::vector<std::string>& roots,
                     const std::string& site);

}  // namespace longhaul::daemon
