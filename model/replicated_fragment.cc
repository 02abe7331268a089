// ReplicatedFragment; see replicated_fragment.h.
#include "model/replicated_fragment.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace longhaul::model {

StatusOr<std::unique_ptr<ReplicatedFragment>> ReplicatedFragment::Create(
    const ModelConfig& config, const FragmentOptions& options,
    std::vector<kernels::Ops*> replicas) {
  const int R = static_cast<int>(replicas.size());
  if (R < 1 || R > options.batch_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("data parallelism: ", R, " replicas for a microbatch of ", options.batch_size,
                     " sequences (each replica needs at least one; lower the devices or raise "
                     "microbatch_size)"));
  }
  std::unique_ptr<ReplicatedFragment> f(new ReplicatedFragment());
  f->config_ = config;
  f->options_ = options;
  const std::vector<int> rows = ReplicaRows(options.batch_size, R);
  int row = 0;
  for (int i = 0; i < R; ++i) {
    Replica r;
    r.ops = replicas[i];
    r.row_begin = row;
    r.rows = rows[i];
    row += r.rows;
    FragmentOptions o = options;
    o.batch_size = r.rows;
    o.optimizer_begin = 0;  // the whole state unless sharded here
    o.optimizer_end = -1;
    if (options.shard_optimizer && R > 1) {
      // ZeRO-1: replica i keeps and steps the AdamW state of part i of the flat layout.
      const int64_t total = FragmentLayout(config, options.begin, options.end).total();
      o.optimizer_begin = total * i / R;
      o.optimizer_end = total * (i + 1) / R;
    }
    ASSIGN_OR_RETURN(r.fragment, Fragment::Create(config, o, r.ops));
    // Holds the input activations, and later the output's gradient.
    r.in = r.ops->Alloc(static_cast<size_t>(r.rows) * options.seq_len *
                        std::max(r.fragment->input_width(), r.fragment->output_width()));
    f->replicas_.push_back(std::move(r));
  }
  ASSIGN_OR_RETURN(f->reducer_, kernels::MakeReplicaReducer(replicas));
  if (f->sharded()) {
    // An all-gather of empty parts: a reducer without one (NCCL's, for now) refuses here, not
    // after the replicas have stepped their parts.
    std::vector<float*> none(replicas.size(), nullptr);
    const std::vector<size_t> empty(replicas.size() + 1, 0);
    if (Status s = f->reducer_->AllGather(none, empty); !s.ok()) {
      return Status(s.code(), absl::StrCat("sharded optimizer state on ", R, " replicas (",
                                           f->reducer_->name(), " reducer): ", s.message()));
    }
  }
  return f;
}

std::vector<int> ReplicatedFragment::ReplicaRows(int batch_size, int replicas) {
  std::vector<int> rows(static_cast<size_t>(replicas));
  for (int i = 0; i < replicas; ++i) rows[i] = batch_size / replicas + (i < batch_size % replicas);
  return rows;
}

ReplicatedFragment::~ReplicatedFragment() {
  for (auto& r : replicas_) {
    if (r.in != nullptr) r.ops->Free(r.in);
  }
}

size_t ReplicatedFragment::RowFloats(bool output) const {
  return static_cast<size_t>(options_.seq_len) *
         (output ? primary().output_width() : primary().input_width());
}

void ReplicatedFragment::InitParameters(uint64_t seed) {
  for (auto& r : replicas_) r.fragment->InitParameters(seed);
}
void ReplicatedFragment::SetParameters(const float* host) {
  for (auto& r : replicas_) r.fragment->SetParameters(host);
}
void ReplicatedFragment::GetParameters(float* host) const { primary().GetParameters(host); }
void ReplicatedFragment::LoadFromModel(const float* model_params) {
  for (auto& r : replicas_) r.fragment->LoadFromModel(model_params);
}
void ReplicatedFragment::SetOptimizerState(const float* m_host, const float* v_host) {
  for (auto& r : replicas_) r.fragment->SetOptimizerState(m_host, v_host);
}
void ReplicatedFragment::GetOptimizerState(float* m_host, float* v_host) const {
  if (!sharded()) {
    primary().GetOptimizerState(m_host, v_host);
    return;
  }
  for (const auto& r : replicas_) r.fragment->GetOptimizerState(m_host, v_host);  // each its part
}

Status ReplicatedFragment::Forward(int slot, const int32_t* tokens, const float* activations) {
  // Every replica's work is queued before any result is read back, so GPUs run concurrently.
  for (auto& r : replicas_) {
    const size_t first = static_cast<size_t>(r.row_begin);
    // Tokens for the first fragment, and for every fragment of the subspace-cut variant.
    const int32_t* rows = tokens == nullptr ? nullptr : tokens + first * options_.seq_len;
    if (r.fragment->is_first()) {
      RETURN_IF_ERROR(r.fragment->Forward(slot, rows, nullptr));
      continue;
    }
    if (activations == nullptr) {
      return absl::InvalidArgumentError("Forward: a fragment after the first needs activations");
    }
    if (activations != r.in) {
      r.ops->Upload(r.in, activations + first * RowFloats(false), r.rows * RowFloats(false));
    }
    RETURN_IF_ERROR(r.fragment->Forward(slot, rows, r.in));
  }
  return absl::OkStatus();
}

void ReplicatedFragment::Output(int slot, float* host) const {
  for (const auto& r : replicas_) {
    r.ops->Download(host + r.row_begin * RowFloats(true), r.fragment->Output(slot),
                    r.rows * RowFloats(true));
  }
}

StatusOr<float> ReplicatedFragment::Loss(int slot, const int32_t* targets) {
  if (replicas_.size() == 1) return replicas_[0].fragment->Loss(slot, targets);
  double sum = 0;
  for (auto& r : replicas_) {
    ASSIGN_OR_RETURN(
        const float loss,
        r.fragment->Loss(slot, targets + static_cast<size_t>(r.row_begin) * options_.seq_len));
    sum += static_cast<double>(loss) * r.rows;
  }
  return static_cast<float>(sum / options_.batch_size);
}

Status ReplicatedFragment::Backward(int slot, const float* output_grad, float dloss) {
  for (auto& r : replicas_) {
    if (output_grad != nullptr) {
      if (output_grad != r.in) {
        r.ops->Upload(r.in, output_grad + r.row_begin * RowFloats(true), r.rows * RowFloats(true));
      }
      RETURN_IF_ERROR(r.fragment->Backward(slot, r.in, dloss));
    } else {
      RETURN_IF_ERROR(r.fragment->Backward(slot, nullptr, dloss));
    }
  }
  return absl::OkStatus();
}

void ReplicatedFragment::InputGrad(float* host) const {
  for (const auto& r : replicas_) {
    r.ops->Download(host + r.row_begin * RowFloats(false), r.fragment->InputGrad(),
                    r.rows * RowFloats(false));
  }
}

void ReplicatedFragment::ZeroGrads() {
  for (auto& r : replicas_) r.fragment->ZeroGrads();
}

Status ReplicatedFragment::ReduceGradients() {
  if (replicas_.size() == 1) return absl::OkStatus();
  std::vector<float*> grads;
  for (auto& r : replicas_) grads.push_back(r.fragment->MutableGradients());
  RETURN_IF_ERROR(reducer_->AllReduceSum(grads, layout().total()));
  // A whole model computes both parts of wte's gradient itself: the peer part too.
  if (is_first() && is_last() && TiedHead(config_)) {
    std::vector<float*> peer;
    for (auto& r : replicas_) peer.push_back(r.fragment->TiedGradPeer());
    RETURN_IF_ERROR(reducer_->AllReduceSum(peer, layout().model().size(Tensor::kWte)));
  }
  return absl::OkStatus();
}

void ReplicatedFragment::TiedGradOwn(float* host) const {
  const auto& r = replicas_[0];
  r.ops->Download(host, r.fragment->TiedGradOwn(), layout().model().size(Tensor::kWte));
}

void ReplicatedFragment::SetTiedGradOwn(const float* host) {
  for (auto& r : replicas_) {
    r.ops->Upload(r.fragment->MutableTiedGradOwn(), host, layout().model().size(Tensor::kWte));
  }
}

void ReplicatedFragment::SetTiedGradPeer(const float* host) {
  for (auto& r : replicas_) {
    r.ops->Upload(r.fragment->TiedGradPeer(), host, layout().model().size(Tensor::kWte));
  }
}

void ReplicatedFragment::CombineTiedGrads() {
  for (auto& r : replicas_) r.fragment->CombineTiedGrads();
}

std::vector<double> ReplicatedFragment::GradSliceSums() const { return primary().GradSliceSums(); }

Status ReplicatedFragment::Step(const OptimizerOptions& options, float lr, float grad_scale,
                                int t) {
  for (auto& r : replicas_) r.fragment->Step(options, lr, grad_scale, t);
  if (!sharded()) return absl::OkStatus();
  // ZeRO-1: each replica stepped its part; the reducer's all-gather gives every replica every
  // part. Elementwise AdamW on the same summed gradient: the same bits as every replica
  // stepping everything.
  std::vector<float*> params;
  std::vector<size_t> offsets;
  for (auto& r : replicas_) {
    params.push_back(r.fragment->MutableParameters());
    offsets.push_back(static_cast<size_t>(r.fragment->optimizer_begin()));
  }
  offsets.push_back(static_cast<size_t>(replicas_.back().fragment->optimizer_end()));
  if (Status s = reducer_->AllGather(params, offsets); !s.ok()) {
    return Status(s.code(), "sharded optimizer step: " + std::string(s.message()));
  }
  return absl::OkStatus();
}

}  // namespace longhaul::model
