// init_from, read the same way by every caller (see init_from.h).
#include "model/init_from.h"

#include "model/checkpoint.h"
#include "model/hf_checkpoint.h"
#include "model/safetensors.h"

namespace longhaul::model {

StatusOr<ModelConfig> ReadInitConfig(const std::string& path) {
  if (IsHfModelDir(path)) return ReadHfConfig(path);
  return ReadCheckpointConfig(path);
}

StatusOr<std::unique_ptr<InitSource>> InitSource::Open(const std::string& path) {
  std::unique_ptr<InitSource> source(new InitSource);
  source->path_ = path;
  if (IsHfModelDir(path)) {
    ASSIGN_OR_RETURN(source->config_, ReadHfConfig(path));
    ASSIGN_OR_RETURN(source->hf_, HfTensorSource::Open(path));
  } else {
    ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpoint(path));
    source->config_ = ckpt.config;
    source->whole_ = std::move(ckpt.params);
  }
  return source;
}

Status InitSource::ReadFragment(const FragmentLayout& layout, float* params) const {
  RETURN_IF_ERROR(CheckConfigMatches(layout.model().config(), config_, path_));
  if (hf_ != nullptr) return ReadHfFragment(*hf_, path_, layout, params);
  layout.ExtractFromModel(whole_.data(), params);
  return absl::OkStatus();
}

Status ReadInitFragment(const std::string& path, const FragmentLayout& layout, float* params) {
  ASSIGN_OR_RETURN(auto source, InitSource::Open(path));
  return source->ReadFragment(layout, params);
}

Status InitSource::LoadInto(FragmentChain& chain) const {
  for (int i = 0; i < chain.size(); ++i) {
    Fragment& f = chain.fragment(i);
    std::vector<float> params(f.layout().total());
    RETURN_IF_ERROR(ReadFragment(f.layout(), params.data()));
    f.SetParameters(params.data());
  }
  return absl::OkStatus();
}

}  // namespace longhaul::model
