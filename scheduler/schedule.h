// One training step of a pipeline played exactly, on steady links: the schedule the stage
// runner follows (daemon/job/stage/stage_runner.cc) reduced to times. Stage i runs its warm-up
// forwards (plain 1F1B's min(M, S - i - 1), or the WAN-aware schedule's, in_flight.h), then
// alternates one forward and one backward, then drains; an op starts when its stage is free and its
// input has arrived. Each directed link between neighbours has one FIFO sender: a tensor leaves
// when it is encoded and the link is free, occupies the link for its wire time, and arrives rtt/2
// later. After its last backward the first and the last stage swap their tied-embedding gradients
// (over the neighbour links when there are two stages, a direct link otherwise; not at all when
// the head is untied); then every stage reports to the coordinator and the step ends when the
// last report arrives. The stage may begin the step once the previous decision reached it and
// its optimizer step ran.
//
// Optionally records the critical path: which segments (compute on a stage, a link's wire
// time or latency, ...) the step's end waited for, back to the previous decision.
#pragma once

#include <vector>

namespace longhaul::scheduler {

struct ScheduleInputs {
  int microbatches = 1;
  // Per stage: warm-up forwards (pipeline_order.h); empty or not ValidWarmups: plain 1F1B.
  std::vector<int> warmup;
  // Per stage.
  std::vector<double> release;    // when the previous barrier decision reaches the stage
  std::vector<double> optimizer;  // its AdamW step, before the first op
  std::vector<double> forward;    // one forward op: decode input + compute + encode output
  std::vector<double> backward;   // one backward op, likewise
  std::vector<double> report;     // latency of its report to the coordinator
  // Per boundary k between stage k and k + 1 (S - 1 entries).
  std::vector<double> act_wire, act_latency;    // k -> k + 1
  std::vector<double> grad_wire, grad_latency;  // k + 1 -> k
  // The tied-embedding exchange (more than one stage, and a head tied to the embedding: an
  // untied head exchanges nothing).
  bool tied_exchange = true;
  double tied_encode = 0, tied_decode = 0;
  double tied_fl_wire = 0, tied_fl_latency = 0;  // first -> last
  double tied_lf_wire = 0, tied_lf_latency = 0;  // last -> first

  int stages() const { return static_cast<int>(forward.size()); }
};

// A stretch of the critical path.
struct PathSegment {
  enum Kind {
    kRelease,      // the decision travelling to a stage (index: stage)
    kOptimizer,    // index: stage
    kCompute,      // forward/backward ops incl. codec work (index: stage)
    kActWire,      // index: boundary
    kActLatency,   // index: boundary
    kGradWire,     // index: boundary
    kGradLatency,  // index: boundary
    kTiedCodec,    // index: stage
    kTiedWire,     // index: 0 first -> last, 1 last -> first
    kTiedLatency,  // likewise
    kReport,       // a stage's report travelling to the coordinator (index: stage)
  };
  Kind kind;
  int index = 0;
  double seconds = 0;
};

struct ScheduleResult {
  double step_seconds = 0;        // decision to decision
  std::vector<double> stage_end;  // end of each stage's last backward
  double tied_seconds = 0;        // first stage: last backward to tied gradient combined
  // The critical path, merged per (kind, index), in no particular order; filled when asked.
  std::vector<PathSegment> critical_path;
};

// Plays the step. `result` may be null (the fast path); `trace` asks for the critical path.
double PlayStep(const ScheduleInputs& in, ScheduleResult* result, bool trace);

}  // namespace longhaul::scheduler
