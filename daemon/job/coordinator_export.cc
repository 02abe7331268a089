// Coordinator::Export: an llm.c checkpoint of the model at the job's last committed step,
// assembled from every stage site's fragment (fetched and checked chunk by chunk).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "daemon/job/coordinator.h"
#include "daemon/job/fragment_slices.h"
#include "model/checkpoint.h"
#include "model/layout.h"

namespace longhaul::daemon {

Status Coordinator::Export(
    const std::function<Status(const std::string& bytes, uint64_t total)>& sink) {
  v1::JobStatus r = GetStatus(1);
  if (r.committed_step() == 0) {
    return absl::FailedPreconditionError("job " + r.job_id() + " has no committed checkpoint yet");
  }
  const model::ModelConfig& config = spec_.job.model;
  std::vector<float> params(model::NumParameters(config));
  // Pipeline replicas: the first live replica's model (they are identical after each sync; a
  // dropped one's checkpoints stop where it was dropped).
  const int source =
      std::max(0, RejoinSource(StageGrid::OfPlan(spec_.replicas, r.stages()),
                               {r.dropped_replicas().begin(), r.dropped_replicas().end()},
                               {r.rejoining_replicas().begin(), r.rejoining_replicas().end()}));
  for (const auto& st : r.stages()) {
    if (st.replica() != static_cast<uint32_t>(source)) continue;
    model::FragmentLayout layout(config, st.layer_begin(), st.layer_end());
    FragmentArray flat;
    flat.values.resize(layout.total());
    transport::Link* c = env_.channel(st.site());
    if (!c) return absl::NotFoundError("unknown site " + st.site());
    v1::FetchFragmentRequest req;
    req.set_job_id(r.job_id());
    req.set_step(r.committed_step());
    req.set_layer_begin(st.layer_begin());
    req.set_layer_end(st.layer_end());
    RETURN_IF_ERROR(c->FetchFragment(req, [&](transport::WireTensor t) -> Status {
      if (t.header.kind() != v1::TENSOR_KIND_PARAMETERS) return absl::OkStatus();
      return PlaceSlice(t, &flat, st.site());
    }));
    RETURN_IF_ERROR(CheckComplete(flat, st.site(), "parameters"));
    layout.InsertIntoModel(flat.values.data(), params.data());
  }
  const std::string path = env_.job_dir + "/export.bin";
  RETURN_IF_ERROR(model::WriteCheckpoint(path, config, params.data()));
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  std::filesystem::remove(path);
  const size_t chunk = 1 << 20;
  for (size_t off = 0; off < bytes.size(); off += chunk) {
    RETURN_IF_ERROR(sink(bytes.substr(off, chunk), bytes.size()));
  }
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
