// A two-fragment training run with a codec on the cut (see cut_run.h).
#include "tools/bench/cut_run.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compression/frame.h"
#include "model/chain.h"
#include "model/optimizer.h"
#include "model/targets_frame.h"

namespace longhaul::bench {
namespace {

// proto/longhaul.proto TensorKind values, which StageRunner folds into the encode seed.
constexpr uint64_t kKindActivation = 1;
constexpr uint64_t kKindActivationGrad = 2;
constexpr uint64_t kKindTargets = 3;
constexpr uint64_t kKindWeightGrad = 4;

// StageRunner::Send's stochastic-rounding seed for a tensor.
uint64_t SendSeed(uint64_t step, int mb, uint64_t kind) {
  return step * 1000003 + static_cast<uint64_t>(mb) * 31 + kind;
}

}  // namespace

StatusOr<std::unique_ptr<CutRun>> CutRun::Create(const model::Job& job,
                                                 std::shared_ptr<const model::TokenData> train,
                                                 std::shared_ptr<const model::TokenData> val,
                                                 const CutRunOptions& options) {
  if (job.model.num_layers < 2) {
    return absl::InvalidArgumentError("the model needs at least 2 layers to be cut in two");
  }
  std::unique_ptr<CutRun> run(new CutRun());
  run->job_ = job;
  ASSIGN_OR_RETURN(run->forward_, compression::MakeCodec(options.forward_codec));
  ASSIGN_OR_RETURN(run->backward_, compression::MakeCodec(options.backward_codec));
  ASSIGN_OR_RETURN(run->exact_, compression::MakeCodec("fp32"));
  for (auto& t : run->tied_) {
    ASSIGN_OR_RETURN(t, model::TiedGradCodec::Create(options.tied_codec));
  }
  ASSIGN_OR_RETURN(run->ops_, kernels::MakeOps(job.backend, options.threads));
  const std::vector<int> bounds = model::FragmentChain::EvenSplit(job.model.num_layers, 2);
  model::FragmentOptions fo;
  fo.batch_size = job.microbatch_size;
  fo.seq_len = job.seq_len;
  fo.begin = bounds[0];
  fo.end = bounds[1];
  ASSIGN_OR_RETURN(run->first_, model::Fragment::Create(job.model, fo, run->ops_.get()));
  fo.begin = bounds[1];
  fo.end = bounds[2];
  ASSIGN_OR_RETURN(run->last_, model::Fragment::Create(job.model, fo, run->ops_.get()));
  run->first_->InitParameters(options.seed);
  run->last_->InitParameters(options.seed);

  model::DataLoaderOptions lo;
  lo.batch_size = job.microbatch_size;
  lo.seq_len = job.seq_len;
  lo.seed = options.seed;
  ASSIGN_OR_RETURN(run->train_loader_, model::DataLoader::Create(std::move(train), lo));
  if (val != nullptr) {
    lo.seed = job.seed;
    lo.shuffle = false;
    ASSIGN_OR_RETURN(run->val_loader_, model::DataLoader::Create(std::move(val), lo));
  }
  const size_t bt = size_t(job.microbatch_size) * job.seq_len;
  const size_t act = bt * size_t(run->first_->output_width());
  const size_t wte = size_t(job.model.padded_vocab_size) * job.model.channels;
  run->tokens_.resize(bt);
  run->targets_.resize(bt);
  run->host_.resize(std::max(act, wte));
  run->received_ = run->ops_->Alloc(act);
  return run;
}

CutRun::~CutRun() {
  if (ops_ != nullptr && received_ != nullptr) ops_->Free(received_);
}

Status CutRun::Transfer(const compression::Codec& codec, const float* src, float* dst, size_t n,
                        std::vector<int64_t> shape, uint64_t seed, bool counted_as_codec) {
  using Clock = std::chrono::steady_clock;
  ops_->Download(host_.data(), src, n);
  const auto t0 = Clock::now();
  compression::EncodeOptions eo;
  eo.seed = seed;
  std::vector<uint8_t> frame;
  RETURN_IF_ERROR(compression::EncodeFrame(codec, {host_.data(), n}, shape, eo, &frame));
  compression::FrameLimits limits;
  limits.max_elements = n;
  ASSIGN_OR_RETURN(compression::DecodedFrame decoded, compression::DecodeFrame(frame, limits));
  if (decoded.values.size() != n) {
    return absl::InternalError(
        absl::StrCat("decoded ", decoded.values.size(), " values, expected ", n));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  ops_->Upload(dst, decoded.values.data(), n);
  if (counted_as_codec) {
    traffic_.codec_raw += n * sizeof(float);
    traffic_.codec_wire += frame.size();
    traffic_.codec_seconds += seconds;
  } else {
    traffic_.exact_wire += frame.size();
  }
  return absl::OkStatus();
}

Status CutRun::SendTokens(uint64_t seed) {
  const int B = job_.microbatch_size, T = job_.seq_len;
  // The standard model's last stage needs the targets; the subspace-cut variant's needs the
  // inputs too (model/targets_frame.h).
  const bool window = model::Subspace(job_.model);
  const std::vector<float> values =
      model::PackTargetsFrame(job_.model, B, T, tokens_.data(), targets_.data());
  compression::EncodeOptions eo;
  eo.seed = seed;
  std::vector<uint8_t> frame;
  RETURN_IF_ERROR(compression::EncodeFrame(
      *exact_, values, std::vector<int64_t>{B, model::TargetsFrameRow(job_.model, T)}, eo, &frame));
  ASSIGN_OR_RETURN(compression::DecodedFrame d, compression::DecodeFrame(frame));
  RETURN_IF_ERROR(model::UnpackTargetsFrame(job_.model, B, T, d.values,
                                            window ? tokens_.data() : nullptr, targets_.data()));
  traffic_.exact_wire += frame.size();
  return absl::OkStatus();
}

StatusOr<float> CutRun::TrainStep(int step, int total_steps) {
  const int B = job_.microbatch_size, T = job_.seq_len, C = job_.model.channels;
  const int R = first_->output_width();
  const int M = job_.microbatches();
  const size_t bt = size_t(B) * T, act = bt * R;
  first_->ZeroGrads();
  last_->ZeroGrads();
  const float dloss = 1.0f / (float(B) * T * M);
  double loss_sum = 0.0;
  for (int mb = 0; mb < M; ++mb) {
    RETURN_IF_ERROR(train_loader_->Next(tokens_.data(), targets_.data()));
    // Stage 0 forward; activations and targets cross the cut.
    RETURN_IF_ERROR(first_->Forward(0, tokens_.data(), nullptr));
    RETURN_IF_ERROR(Annotate(Transfer(*forward_, first_->Output(0), received_, act, {B, T, R},
                                      SendSeed(step, mb, kKindActivation), true),
                             "activations"));
    // Targets (and the subspace-cut variant's tokens) travel as an exact fp32 frame, as
    // StageRunner sends targets; they stay host-side.
    RETURN_IF_ERROR(SendTokens(SendSeed(step, mb, kKindTargets)));
    // Stage 1 forward, loss and backward; the activation gradient crosses back.
    RETURN_IF_ERROR(last_->Forward(0, last_->needs_tokens() ? tokens_.data() : nullptr, received_));
    ASSIGN_OR_RETURN(const float loss, last_->Loss(0, targets_.data()));
    loss_sum += loss;
    RETURN_IF_ERROR(last_->Backward(0, nullptr, dloss));
    RETURN_IF_ERROR(Annotate(Transfer(*backward_, last_->InputGrad(), received_, act, {B, T, R},
                                      SendSeed(step, mb, kKindActivationGrad), true),
                             "activation gradients"));
    RETURN_IF_ERROR(first_->Backward(0, received_, 0.0f));
  }
  // Tied embedding: both parts travel before either fragment combines.
  const int64_t vp = job_.model.padded_vocab_size;
  const size_t wte = size_t(vp) * C;
  const uint64_t exact_before = traffic_.exact_wire;
  if (!model::TiedHead(job_.model)) {
    // Untied head (subspace-cut variant): nothing to exchange.
  } else if (tied_[0]) {
    // Each end's part as its frame carries it, in place of its own and as the other's peer.
    const int64_t shape[2] = {vp, C};
    std::vector<uint8_t> frame;
    model::Fragment* ends[2] = {first_.get(), last_.get()};
    for (int e = 0; e < 2; ++e) {
      ops_->Download(host_.data(), ends[e]->TiedGradOwn(), wte);
      RETURN_IF_ERROR(tied_[e]->EncodeInPlace({host_.data(), wte}, shape,
                                              SendSeed(step, 0, kKindWeightGrad), &frame));
      traffic_.exact_wire += frame.size();
      ops_->Upload(ends[e]->MutableTiedGradOwn(), host_.data(), wte);
      ops_->Upload(ends[1 - e]->TiedGradPeer(), host_.data(), wte);
    }
  } else {
    RETURN_IF_ERROR(Transfer(*exact_, first_->TiedGradOwn(), last_->TiedGradPeer(), wte, {vp, C},
                             SendSeed(step, 0, kKindWeightGrad), false));
    RETURN_IF_ERROR(Transfer(*exact_, last_->TiedGradOwn(), first_->TiedGradPeer(), wte, {vp, C},
                             SendSeed(step, 0, kKindWeightGrad), false));
  }
  traffic_.tied_wire += traffic_.exact_wire - exact_before;
  std::vector<double> sums;
  for (model::Fragment* f : {first_.get(), last_.get()}) {
    f->CombineTiedGrads();
    model::AddSliceSums(f->GradSliceSums(), &sums);
  }
  const float norm = model::GradNorm(sums);
  const float lr = model::LearningRate(job_.optimizer, step, total_steps);
  const float scale = model::ClipScale(norm, job_.optimizer.grad_clip);
  first_->Step(job_.optimizer, lr, scale, step + 1);
  last_->Step(job_.optimizer, lr, scale, step + 1);
  return float(loss_sum / M);
}

StatusOr<float> CutRun::Validate(bool through_codec) {
  if (val_loader_ == nullptr)
    return absl::FailedPreconditionError("the job has no validation data");
  model::DataLoaderState start = val_loader_->state();
  start.position = 0;
  RETURN_IF_ERROR(val_loader_->Restore(start));
  const int batches = int(std::min<int64_t>(
      job_.data.val_batches, std::max<int64_t>(val_loader_->batches_per_epoch(), 1)));
  const int B = job_.microbatch_size, T = job_.seq_len, R = first_->output_width();
  const size_t act = size_t(B) * T * R;
  double sum = 0.0;
  for (int i = 0; i < batches; ++i) {
    RETURN_IF_ERROR(val_loader_->Next(tokens_.data(), targets_.data()));
    RETURN_IF_ERROR(first_->Forward(0, tokens_.data(), nullptr));
    if (through_codec) {
      // Evaluation traffic is not training traffic: keep the counters as they were.
      const CutTraffic saved = traffic_;
      const Status s = Transfer(*forward_, first_->Output(0), received_, act, {B, T, R},
                                SendSeed(uint64_t{1} << 40, i, kKindActivation), true);
      traffic_ = saved;
      RETURN_IF_ERROR(s);
    } else {
      ops_->Copy(received_, first_->Output(0), act);
    }
    RETURN_IF_ERROR(last_->Forward(0, last_->needs_tokens() ? tokens_.data() : nullptr, received_));
    ASSIGN_OR_RETURN(const float loss, last_->Loss(0, targets_.data()));
    sum += loss;
  }
  return float(sum / std::max(batches, 1));
}

std::vector<float> CutRun::Parameters() const {
  std::vector<float> params(model::NumParameters(job_.model));
  // The tied wte is stored by the first fragment last; both copies are identical anyway.
  last_->StoreIntoModel(params.data());
  first_->StoreIntoModel(params.data());
  return params;
}

Status VerifyAgainstChain(const model::Job& job,
                          const std::shared_ptr<const model::TokenData>& train, uint64_t seed,
                          int threads, int steps) {
  CutRunOptions options;
  options.seed = seed;
  options.threads = threads;
  ASSIGN_OR_RETURN(auto run, CutRun::Create(job, train, nullptr, options));
  ASSIGN_OR_RETURN(auto ops, kernels::MakeOps(job.backend, threads));
  model::ChainOptions co;
  co.fragments = 2;
  co.batch_size = job.microbatch_size;
  co.seq_len = job.seq_len;
  ASSIGN_OR_RETURN(auto chain, model::FragmentChain::Create(job.model, co, ops.get()));
  chain->InitParameters(seed);
  model::DataLoaderOptions lo;
  lo.batch_size = job.microbatch_size;
  lo.seq_len = job.seq_len;
  lo.seed = seed;
  ASSIGN_OR_RETURN(auto loader, model::DataLoader::Create(train, lo));
  for (int step = 0; step < steps; ++step) {
    ASSIGN_OR_RETURN(const float ours, run->TrainStep(step, job.steps));
    ASSIGN_OR_RETURN(const model::StepResult theirs,
                     chain->TrainStep(*loader, job.microbatches(), job.optimizer, step, job.steps));
    if (std::bit_cast<uint32_t>(ours) != std::bit_cast<uint32_t>(theirs.loss)) {
      return absl::InternalError(absl::StrCat("step ", step + 1, ": loss ", ours, " over frames, ",
                                              theirs.loss, " in FragmentChain"));
    }
  }
  const std::vector<float> ours = run->Parameters();
  std::vector<float> theirs(ours.size());
  chain->StoreIntoModel(theirs.data());
  if (std::memcmp(ours.data(), theirs.data(), ours.size() * sizeof(float)) != 0) {
    return absl::InternalError(
        absl::StrCat("parameters differ from FragmentChain's after ", steps, " steps"));
  }
  return absl::OkStatus();
}

}  // namespace longhaul::bench
