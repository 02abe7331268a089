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

Status ReadInitFragment(const std::string& path, const FragmentLayout& layout, float* params) {
  const ModelConfig& want = layout.model().config();
  if (IsHfModelDir(path)) {
    ASSIGN_OR_RETURN(const ModelConfig have, ReadHfConfig(path));
    RETURN_IF_ERROR(CheckConfigMatches(want, have, path));
    ASSIGN_OR_RETURN(auto source, HfTensorSource::Open(path));
    return ReadHfFragment(*source, path, layout, params);
  }
  ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpoint(path));
  RETURN_IF_ERROR(CheckConfigMatches(want, ckpt.config, path));
  layout.ExtractFromModel(ckpt.params.data(), params);
  return absl::OkStatus();
}

}  // namespace longhaul::model
