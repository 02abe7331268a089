// Timing one layer's forward, backward and AdamW step (see calibration.h).
#include "scheduler/calibration.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/fragment.h"

namespace longhaul::scheduler {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

StatusOr<Calibration> CalibrateLayer(kernels::Ops* ops, const model::ModelConfig& config,
                                     const CalibrationOptions& o) {
  if (o.repetitions <= 0) return absl::InvalidArgumentError("calibration: repetitions must be > 0");
  // The job's own model (its family and every width of its layer) cut to three layers, so
  // that layer 1 is a middle fragment: no embedding, no head. The subspace-cut variant is
  // timed as the standard model, as the FLOP conventions count it.
  model::ModelConfig c = config;
  c.num_layers = 3;
  c.residual_subspace = 0;
  c.unconstrained_layers = 0;
  model::FragmentOptions fo;
  fo.begin = 1, fo.end = 2, fo.batch_size = o.batch_size, fo.seq_len = o.seq_len, fo.slots = 1;
  ASSIGN_OR_RETURN(auto fragment, model::Fragment::Create(c, fo, ops));
  fragment->InitParameters(o.seed);
  const size_t n = static_cast<size_t>(o.batch_size) * o.seq_len * model::StreamWidth(c, 1);
  std::vector<float> host(n);
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<float> normal(0, 1);
  for (float& x : host) x = normal(rng);
  float* input = ops->Alloc(n);
  float* grad = ops->Alloc(n);
  ops->Upload(input, host.data(), n);
  for (float& x : host) x = 0.01f * normal(rng);
  ops->Upload(grad, host.data(), n);

  std::vector<double> fwd, bwd, opt;
  Status status;
  for (int rep = 0; rep <= o.repetitions && status.ok(); ++rep) {  // rep 0 warms up
    const double t0 = Now();
    status = fragment->Forward(0, nullptr, input);
    ops->Synchronize();
    const double t1 = Now();
    if (status.ok()) status = fragment->Backward(0, grad, 0);
    ops->Synchronize();
    const double t2 = Now();
    fragment->Step(model::OptimizerOptions{}, 1e-4f, 1.0f, rep + 1);
    ops->Synchronize();
    const double t3 = Now();
    fragment->ZeroGrads();
    if (rep > 0) fwd.push_back(t1 - t0), bwd.push_back(t2 - t1), opt.push_back(t3 - t2);
  }
  ops->Free(input);
  ops->Free(grad);
  if (!status.ok()) return Annotate(status, "calibration");
  Calibration cal;
  cal.forward_seconds = Median(fwd);
  cal.backward_seconds = Median(bwd);
  cal.optimizer_seconds = Median(opt);
  cal.layer_parameters = fragment->layout().total();
  cal.flops = FlopsFromLayerSeconds(config, o.batch_size, o.seq_len,
                                    std::max(cal.seconds_per_layer(), 1e-12));
  cal.optimizer_params_per_second = cal.layer_parameters / std::max(cal.optimizer_seconds, 1e-12);
  return cal;
}

SiteProfile ProfileFromCalibration(const std::string& site, const Calibration& c,
                                   int64_t memory_bytes) {
  return {site, c.flops, memory_bytes, c.optimizer_params_per_second};
}

}  // namespace longhaul::scheduler
