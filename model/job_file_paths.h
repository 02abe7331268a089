// The one rule for relative paths in a job file: they are relative to the job file's folder,
// in `train-local`, `plan` and `submit` alike. train-local and plan read the file where it is;
// submit sends the text to a daemon, which has no such folder (and may run on another
// machine), so the CLI first rewrites each relative path as the absolute path it names here.
// A daemon refuses a job that still names a relative path (model/job.cc).
#pragma once

#include <string>

#include "common/status.h"

namespace longhaul::model {

// `text` with each relative path among init_from, data.train, data.val and checkpoint.dir
// replaced by base_dir/path (base_dir absolute), written as a double-quoted YAML string;
// every other byte is kept, so line numbers in a daemon's errors still point into the
// user's file. "builtin" data and absolute paths are left alone. InvalidArgument (naming
// source:line:column) when a path cannot be rewritten in place (an alias, a tag, a scalar
// over several lines) or the text is not a YAML map: the daemon would refuse it anyway.
StatusOr<std::string> AbsoluteJobPaths(const std::string& text, const std::string& source,
                                       const std::string& base_dir);

}  // namespace longhaul::model
