// Fragments chained in one process (see chain.h).
#include "model/chain.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace longhaul::model {

std::vector<int> FragmentChain::EvenSplit(int num_layers, int fragments) {
  std::vector<int> bounds = {0};
  for (int i = 0; i < fragments; ++i) {
    bounds.push_back(bounds.back() + num_layers / fragments + (i < num_layers % fragments));
  }
  return bounds;
}

StatusOr<std::unique_ptr<FragmentChain>> FragmentChain::Create(const ModelConfig& config,
                                                               const ChainOptions& options,
                                                               kernels::Ops* ops) {
  RETURN_IF_ERROR(ValidateConfig(config));
  if (options.fragments < 1 || options.fragments > config.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot split ", config.num_layers, " layers into ", options.fragments,
                     " fragments (need 1 to ", config.num_layers, ")"));
  }
  std::unique_ptr<FragmentChain> chain(new FragmentChain(config, options));
  const std::vector<int> bounds = EvenSplit(config.num_layers, options.fragments);
  for (int i = 0; i < options.fragments; ++i) {
    FragmentOptions fo;
    fo.begin = bounds[i];
    fo.end = bounds[i + 1];
    fo.batch_size = options.batch_size;
    fo.seq_len = options.seq_len;
    fo.training = options.training;
    ASSIGN_OR_RETURN(auto fragment, Fragment::Create(config, fo, ops));
    chain->fragments_.push_back(std::move(fragment));
  }
  const size_t bt = size_t(options.batch_size) * options.seq_len;
  chain->inputs_.resize(bt);
  chain->targets_.resize(bt);
  if (options.fragments > 1) {  // a whole model has no tied exchange
    for (auto& c : chain->tied_codecs_) {
      ASSIGN_OR_RETURN(c, TiedGradCodec::Create(options.tied_codec));
    }
  }
  return chain;
}

MemoryReport FragmentChain::memory() const {
  MemoryReport total;
  for (const auto& f : fragments_) {
    const MemoryReport r = f->memory();
    total.parameters += r.parameters;
    total.gradients += r.gradients;
    total.optimizer += r.optimizer;
    total.activations_per_slot += r.activations_per_slot;
    total.shared += r.shared;
    total.slots = r.slots;
  }
  return total;
}

void FragmentChain::InitParameters(uint64_t seed) {
  for (auto& f : fragments_) f->InitParameters(seed);
}

void FragmentChain::LoadFromModel(const float* model_params) {
  for (auto& f : fragments_) f->LoadFromModel(model_params);
}

void FragmentChain::StoreIntoModel(float* model_params) const {
  // The tied wte is stored by the first fragment; the last one's copy is identical.
  for (auto it = fragments_.rbegin(); it != fragments_.rend(); ++it) {
    (*it)->StoreIntoModel(model_params);
  }
}

void FragmentChain::LoadOptimizerState(const float* m, const float* v) {
  for (auto& f : fragments_) {
    std::vector<float> fm(f->layout().total()), fv(f->layout().total());
    f->layout().ExtractFromModel(m, fm.data());
    f->layout().ExtractFromModel(v, fv.data());
    f->SetOptimizerState(fm.data(), fv.data());
  }
}

void FragmentChain::StoreOptimizerState(float* m, float* v) const {
  for (auto it = fragments_.rbegin(); it != fragments_.rend(); ++it) {
    const Fragment& f = **it;
    std::vector<float> fm(f.layout().total()), fv(f.layout().total());
    f.GetOptimizerState(fm.data(), fv.data());
    f.layout().InsertIntoModel(fm.data(), m);
    f.layout().InsertIntoModel(fv.data(), v);
  }
}

StatusOr<float> FragmentChain::ForwardLoss(const int32_t* tokens, const int32_t* targets) {
  const float* activations = nullptr;
  for (auto& f : fragments_) {
    RETURN_IF_ERROR(f->Forward(0, f->needs_tokens() ? tokens : nullptr, activations));
    if (!f->is_last()) activations = f->Output(0);
  }
  return fragments_.back()->Loss(0, targets);
}

Status FragmentChain::Backward(float dloss) {
  const float* grad = nullptr;
  for (auto it = fragments_.rbegin(); it != fragments_.rend(); ++it) {
    RETURN_IF_ERROR((*it)->Backward(0, grad, dloss));
    grad = (*it)->InputGrad();
  }
  return absl::OkStatus();
}

float FragmentChain::ReduceGradients() {
  Fragment& first = *fragments_.front();
  Fragment& last = *fragments_.back();
  if (&first != &last && TiedHead(config_)) {
    // Both parts travel before either fragment combines (combining overwrites its own).
    kernels::Ops* ops = first.ops();
    const size_t n = first.layout().model().size(Tensor::kWte);
    if (tied_codecs_[0]) ExchangeTiedEncoded(n);
    ops->Copy(first.TiedGradPeer(), last.TiedGradOwn(), n);
    ops->Copy(last.TiedGradPeer(), first.TiedGradOwn(), n);
  }
  std::vector<double> sums;
  for (auto& f : fragments_) {
    f->CombineTiedGrads();
    AddSliceSums(f->GradSliceSums(), &sums);
  }
  return GradNorm(sums);
}

void FragmentChain::ExchangeTiedEncoded(size_t n) {
  // Each end's part as its frame carries it (tied_exchange.h), in place of the exact part.
  const int64_t shape[2] = {config_.padded_vocab_size, config_.channels};
  std::vector<float> part(n);
  std::vector<uint8_t> frame;
  for (int end = 0; end < 2; ++end) {
    Fragment& f = end == 0 ? *fragments_.front() : *fragments_.back();
    f.ops()->Download(part.data(), f.TiedGradOwn(), n);
    f.ops()->Synchronize();
    // The pipeline's seed for step `tied_sends_`'s tied tensor (StageExchange's, kind 4).
    const Status s =
        tied_codecs_[end]->EncodeInPlace(part, shape, tied_sends_ * 1000003 + 4, &frame);
    if (!s.ok()) {  // only on a codec bug: the values are this process's own
      std::fprintf(stderr, "tied-embedding exchange: %s\n", std::string(s.message()).c_str());
      std::abort();
    }
    tied_wire_bytes_ += frame.size();
    f.ops()->Upload(f.MutableTiedGradOwn(), part.data(), n);
  }
  ++tied_sends_;
}

StatusOr<double> FragmentChain::AccumulateGradients(DataLoader& loader, int microbatches,
                                                    float dloss) {
  for (auto& f : fragments_) f->ZeroGrads();
  double loss_sum = 0.0;
  for (int m = 0; m < microbatches; ++m) {
    RETURN_IF_ERROR(loader.Next(inputs_.data(), targets_.data()));
    ASSIGN_OR_RETURN(const float loss, ForwardLoss(inputs_.data(), targets_.data()));
    loss_sum += loss;
    RETURN_IF_ERROR(Backward(dloss));
  }
  return loss_sum;
}

void FragmentChain::ApplyStep(const OptimizerOptions& optimizer, float lr, float grad_scale,
                              int t) {
  for (auto& f : fragments_) f->Step(optimizer, lr, grad_scale, t);
}

StatusOr<StepResult> FragmentChain::TrainStep(DataLoader& loader, int microbatches,
                                              const OptimizerOptions& optimizer, int step,
                                              int total_steps) {
  const float dloss = 1.0f / (float(options_.batch_size) * options_.seq_len * microbatches);
  ASSIGN_OR_RETURN(const double loss_sum, AccumulateGradients(loader, microbatches, dloss));
  StepResult result;
  result.loss = float(loss_sum / microbatches);
  result.grad_norm = ReduceGradients();
  result.lr = LearningRate(optimizer, step, total_steps);
  ApplyStep(optimizer, result.lr, ClipScale(result.grad_norm, optimizer.grad_clip), step + 1);
  return result;
}

float FragmentChain::GradientNorm() const {
  std::vector<double> sums;
  for (const auto& f : fragments_) AddSliceSums(f->GradSliceSums(), &sums);
  return GradNorm(sums);
}

void FragmentChain::GetGradients(float* model_grads) const {
  // wte's combined gradient is the same on the first and the last fragment.
  for (auto it = fragments_.rbegin(); it != fragments_.rend(); ++it) {
    const Fragment& f = **it;
    std::vector<float> g(f.layout().total());
    f.GetGradients(g.data());
    f.layout().InsertIntoModel(g.data(), model_grads);
  }
}

void FragmentChain::SetGradients(const float* model_grads) {
  for (auto& f : fragments_) {
    std::vector<float> g(f->layout().total());
    f->layout().ExtractFromModel(model_grads, g.data());
    f->SetGradients(g.data());
  }
}

StatusOr<float> FragmentChain::MeanLoss(DataLoader& loader, int batches) {
  double sum = 0.0;
  for (int i = 0; i < batches; ++i) {
    RETURN_IF_ERROR(loader.Next(inputs_.data(), targets_.data()));
    ASSIGN_OR_RETURN(const float loss, ForwardLoss(inputs_.data(), targets_.data()));
    sum += loss;
  }
  return float(sum / std::max(batches, 1));
}

}  // namespace longhaul::model
