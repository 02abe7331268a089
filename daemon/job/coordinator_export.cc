// Coordinator::Export: the model at the job's last committed step, fetched stage by stage
// from every stage site (checked chunk by chunk), as one checkpoint file (llm.c's GPT-2
// format, or our llama one) or as a Hugging Face directory. The Hugging Face export holds one
// stage's fragment at a time: each becomes one safetensors shard, streamed and deleted before
// the next stage is fetched; the index and config.json come last.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "daemon/job/coordinator.h"
#include "daemon/job/fragment_slices.h"
#include "model/checkpoint.h"
#include "model/hf_checkpoint.h"
#include "model/layout.h"

namespace longhaul::daemon {
namespace {

constexpr size_t kChunk = 1 << 20;

// Streams file `path` to `sink` as `name`, in chunks, then deletes it.
Status StreamFile(const std::string& path, const std::string& name,
                  const Coordinator::ExportSink& sink) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("export: cannot read ", path, ": ", ec.message()));
  std::ifstream in(path, std::ios::binary);
  std::string buf(kChunk, '\0');
  uint64_t sent = 0;
  do {
    in.read(buf.data(), std::streamsize(std::min<uintmax_t>(kChunk, size - sent)));
    const size_t got = size_t(in.gcount());
    if (got == 0 && sent < size) {
      return absl::InternalError(
          absl::StrCat("export: ", path, " ended at ", sent, " of ", size, " bytes"));
    }
    RETURN_IF_ERROR(sink(name, buf.substr(0, got), size));
    sent += got;
  } while (sent < size);
  std::filesystem::remove(path, ec);
  return absl::OkStatus();
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
      std::max(0, RejoinSource(StageGrid::OfPlan(spec_.replicas, r.stages()),
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
    const std::string path = env_.job_dir + "/export.bin";
    RETURN_IF_ERROR(model::WriteCheckpoint(path, config, params.data()));
    return StreamFile(path, "", sink);
  }

  const std::string dir = env_.job_dir + "/export_hf";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::vector<std::pair<std::string, std::vector<std::string>>> shards;
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
    RETURN_IF_ERROR(model::WriteSafetensors(dir + "/" + name, tensors->tensors(), metadata));
    auto& [file, names] = shards.emplace_back(name, std::vector<std::string>{});
    for (const model::StTensor& t : tensors->tensors()) names.push_back(t.name);
    total_bytes += tensors->bytes();
    RETURN_IF_ERROR(StreamFile(dir + "/" + name, name, sink));
  }
  RETURN_IF_ERROR(model::WriteHfIndexAndConfig(dir, config, st_dtype, shards, total_bytes));
  if (shards.size() > 1) {
    RETURN_IF_ERROR(
        StreamFile(dir + "/model.safetensors.index.json", "model.safetensors.index.json", sink));
  }
  return StreamFile(dir + "/config.json", "config.json", sink);
}

}  // namespace longhaul::daemon
