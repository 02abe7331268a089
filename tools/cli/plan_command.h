// `longhaul plan JOB.yaml --profiles FILE`: the placement a job will run, without running it
// -- stages, layers, predicted compute and transfer times, bottleneck, predicted tokens/s.
// For placement: planned (the default) that is the planner's, shown next to an even split of
// the sites in the listed order; for placement: even it is the even split of the listed sites
// (each replica's, with replicas), and the planner's choice follows, labelled "the planner
// would choose" (JSON: "planner"). --sites replaces the job's sites, or gives a job file
// without `sites:` its sites. `-o json` prints the same plan for scripts. The CLI does not
// reach the daemons for profiles: they come from a file (format: scheduler/profiles_yaml.h;
// example: configs/profiles.example.yaml).
#pragma once

#include <CLI/CLI.hpp>
#include <ostream>
#include <string>
#include <vector>

namespace longhaul::cli {

struct PlanFlags {
  std::string job;                 // job file
  std::string profiles;            // profiles file
  std::string output = "table";    // table | json
  std::string coordinator;         // site coordinating the job; "" = the first stage's
  std::vector<std::string> sites;  // candidates instead of the job's; {"all"}: every profiled site
  double time_budget_seconds = 3;
};

// Plans and prints; returns the exit code (0 ok, 1 error, 2 bad input).
int RunPlan(const PlanFlags& flags, std::ostream& out, std::ostream& err);

// Adds `plan` to `app`; `*exit_code` gets its result. Reads the global -o/--output.
void AddPlanCommand(CLI::App& app, int* exit_code);

}  // namespace longhaul::cli
