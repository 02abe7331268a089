// Coordinator::Export: the model at the job's last committed step, fetched stage by stage
// from every stage site (checked chunk by chunk), as one checkpoint file (llm.c's GPT-2
// format, or our llama one) or as a Hugging Face directory, streamed to the caller as the
// writers produce it (no file on the coordinator's disk). The Hugging Face export holds one
// stage's fragment at a time: each becomes one safetensors shard, sent before the next stage
// is fetched; the index and config.json come last.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "daemon/job/coordinator/coordinator.h"
#include "daemon/job/state/fragment_slices.h"
#include "model/checkpoint.h"
#include "model/hf_checkpoint.h"
#include "model/layout.h"

namespace longhaul::daemon {
namespace {

constexpr size_t kChunk = 1 << 20;

// One exported file, sent to the sink in chunks of kChunk as its writer produces it: no copy
// of the model on the coordinator's disk.
class ChunkSink : public model::ByteSink {
 public:
  ChunkSink(std::string name, uint64_t total, const Coordinator::ExportSink& sink)
      : name_(std::move(name)), total_(total), sink_(sink) {}

  Status Write(const void* data, size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const size_t take = std::min(n, kChunk - buffer_.size());
      buffer_.append(p, take);
      p += take;
      n -= take;
      if (buffer_.size() == kChunk) RETURN_IF_ERROR(Flush());
    }
    return absl::OkStatus();
  }
  // Sends what is left; the file must be exactly `total` bytes.
  Status Finish() {
    if (!buffer_.empty()) RETURN_IF_ERROR(Flush());
    if (sent_ != total_) {
      return absl::InternalError(absl::StrCat("export: ", name_.empty() ? "the checkpoint" : name_,
                                              " came to ", sent_, " bytes, not ", total_));
    }
    return absl::OkStatus();
  }

 private:
  Status Flush() {
    sent_ += buffer_.size();
    RETURN_IF_ERROR(sink_(name_, buffer_, total_));
    buffer_.clear();
    return absl::OkStatus();
  }

  std::string name_;
  uint64_t total_;
  const Coordinator::ExportSink& sink_;
  std::string buffer_;
  uint64_t sent_ = 0;
};

// A small file (index, config) sent whole.
Status SendWhole(const std::string& name, const std::string& bytes,
                 const Coordinator::ExportSink& sink) {
  ChunkSink out(name, bytes.size(), sink);
  RETURN_IF_ERROR(out.Write(bytes.data(), bytes.size()));
  return out.Finish();
}

}  // namespace

Status Coordinator::Export(const std::string& format, const std::string& dtype,
                           const ExportSink& sink) {
  const bool hf = format == "hf";
  if (!hf && !format.empty() && format != "llmc") {
    return absl::InvalidArgumentError(
        absl::StrCat("export format '", format, "' is unknown (expected llmc or hf)"));
  }
  if (!dtype.empty() && dtype != "f32" && !(hf && dtype == "bf16")) {
    return absl::InvalidArgumentError(
        absl::StrCat("export dtype '", dtype, "' is unknown (f32, or bf16 for the hf format)"));
  }
  const model::StDtype st_dtype = dtype == "bf16" ? model::StDtype::kBF16 : model::StDtype::kF32;
  v1::JobStatus r = GetStatus(1);
  if (r.committed_step() == 0) {
    return absl::FailedPreconditionError("job " + r.job_id() + " has no committed checkpoint yet");
  }
  const model::ModelConfig& config = spec_.job.model;
  if (hf && model::Subspace(config)) {
    return absl::InvalidArgumentError(
        "the subspace-cut variant has no Hugging Face form; export it with --format llmc");
  }
  // Pipeline replicas: the first live replica's model (they are identical after each sync; a
  // dropped one's checkpoints stop where it was dropped).
  const int source =
      std::max(0, RejoinSource(StageGrid::OfPlan(RecordReplicas(r, spec_), r.stages()),
                               {r.dropped_replicas().begin(), r.dropped_replicas().end()},
                               {r.rejoining_replicas().begin(), r.rejoining_replicas().end()}));
  std::vector<const v1::StageInfo*> stages;
  for (const auto& st : r.stages()) {
    if (st.replica() == static_cast<uint32_t>(source)) stages.push_back(&st);
  }
  auto fetch = [&](const v1::StageInfo& st, FragmentArray* flat) -> Status {
    transport::Link* c = env_.channel(st.site());
    if (!c) return absl::NotFoundError("unknown site " + st.site());
    v1::FetchFragmentRequest req;
    req.set_job_id(r.job_id());
    req.set_step(r.committed_step());
    req.set_layer_begin(st.layer_begin());
    req.set_layer_end(st.layer_end());
    RETURN_IF_ERROR(c->FetchFragment(req, [&](transport::WireTensor t) -> Status {
      if (t.header.kind() != v1::TENSOR_KIND_PARAMETERS) return absl::OkStatus();
      return PlaceSlice(t, flat, st.site());
    }));
    return CheckComplete(*flat, st.site(), "parameters");
  };

  if (!hf) {
    std::vector<float> params(model::NumParameters(config));
    for (const v1::StageInfo* st : stages) {
      model::FragmentLayout layout(config, st->layer_begin(), st->layer_end());
      FragmentArray flat;
      flat.values.resize(layout.total());
      RETURN_IF_ERROR(fetch(*st, &flat));
      layout.InsertIntoModel(flat.values.data(), params.data());
    }
    ChunkSink out("", uint64_t(model::CheckpointBytes(config)), sink);
    RETURN_IF_ERROR(model::WriteCheckpointTo(out, config, params.data()));
    return out.Finish();
  }

  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::map<std::string, std::string> weight_map;  // tensor -> shard
  int64_t total_bytes = 0;
  for (size_t k = 0; k < stages.size(); ++k) {
    const v1::StageInfo& st = *stages[k];
    model::FragmentLayout layout(config, st.layer_begin(), st.layer_end());
    FragmentArray flat;
    flat.values.resize(layout.total());
    RETURN_IF_ERROR(fetch(st, &flat));
    ASSIGN_OR_RETURN(auto tensors,
                     model::HfFragmentTensors::Of(layout, flat.values.data(), st_dtype));
    const std::string name = model::HfShardName(int(k) + 1, int(stages.size()));
    ASSIGN_OR_RETURN(const std::string header,
                     model::SafetensorsHeader(tensors->tensors(), metadata, name));
    ChunkSink out(name, header.size() + uint64_t(tensors->bytes()), sink);
    RETURN_IF_ERROR(model::WriteSafetensorsTo(out, header, tensors->tensors()));
    RETURN_IF_ERROR(out.Finish());
    for (const model::StTensor& t : tensors->tensors()) weight_map[t.name] = name;
    total_bytes += tensors->bytes();
  }
  if (stages.size() > 1) {
    const std::string index_name = "model.safetensors.index.json";
    ASSIGN_OR_RETURN(const std::string index,
                     model::SafetensorsIndexJson(total_bytes, weight_map, index_name));
    RETURN_IF_ERROR(SendWhole(index_name, index, sink));
  }
  return SendWhole("config.json", model::HfConfigJson(config, st_dtype), sink);
}

}  // namespace longhaul::daemon
