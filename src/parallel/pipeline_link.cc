#include "parallel/pipeline_link.h"

#include <fmt/format.h>

#include <chrono>

#include "lockstep/base/error.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;

namespace {
constexpr int64_t kMaxDims = 14;  // meta: dtype, ndim, dims; 16 int64
}

PipelineLink::PipelineLink(lt::Group pair, std::string prefix)
    : pair_(std::move(pair)), prefix_(std::move(prefix)), me_(pair_.rank()) {
  if (pair_.size() != 2 || me_ < 0)
    throw InvalidArgument(
        fmt::format("PipelineLink: {} is not a pair holding this rank", pair_.describe()));
}

PipelineLink::~PipelineLink() {
  // Never leave the engine reading a buffer we free; errors were reported
  // (or are being reported) by the step that issued the sends.
  for (auto& h : sends_) {
    try {
      h.wait();
    } catch (...) {
    }
  }
}

// The first transfer of a micro-batch size carries dtype and shape.
const PipelineLink::Meta& PipelineLink::agree(int64_t rows, const Tensor* activation) {
  auto it = agreed_.find(rows);
  if (it != agreed_.end()) return it->second;
  auto meta = ::torch::zeros({kMaxDims + 2}, ::torch::kInt64);
  if (activation) {
    if (activation->dim() > kMaxDims)
      throw InvalidArgument(fmt::format("Pipeline: an activation of {} dimensions (at most {})",
                                        activation->dim(), kMaxDims));
    meta[0] = static_cast<int64_t>(activation->scalar_type());
    meta[1] = activation->dim();
    for (int64_t d = 0; d < activation->dim(); ++d) meta[2 + d] = activation->size(d);
  }
  lt::broadcast_(meta, 0, fmt::format("{}.meta.{}", prefix_, rows), pair_.id());
  auto* m = meta.data_ptr<int64_t>();
  Meta agreed{static_cast<::torch::ScalarType>(m[0]), std::vector<int64_t>(m + 2, m + 2 + m[1])};
  return agreed_.emplace(rows, std::move(agreed)).first->second;
}

void PipelineLink::send(const Tensor& t, const std::string& name) {
  Tensor buffer = t.contiguous();
  sends_.push_back(lt::broadcast_async_(buffer, me_, name, pair_.id()));
}

Tensor PipelineLink::receive(Tensor buffer, const std::string& name, double* waited) {
  const auto start = std::chrono::steady_clock::now();
  lt::broadcast_(buffer, 1 - me_, name, pair_.id());
  *waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return buffer;
}

void PipelineLink::send_activation(int i, int64_t rows, const Tensor& activation) {
  const Meta& meta = agree(rows, &activation);
  if (activation.scalar_type() != meta.dtype || !activation.sizes().equals(meta.shape))
    throw InvalidArgument(fmt::format(
        "Pipeline: micro-batch {} leaves stage {} as {} {} but micro-batches of {} rows were "
        "agreed as {} {}; a stage's output shape must depend only on the rows",
        i, pair_.global_rank(0), c10::toString(activation.scalar_type()),
        c10::str(activation.sizes()), rows, c10::toString(meta.dtype),
        c10::str(::torch::IntArrayRef(meta.shape))));
  send(activation, fmt::format("{}.f.{}", prefix_, i));
}

Tensor PipelineLink::receive_activation(int i, int64_t rows, double* waited) {
  const Meta& meta = agree(rows, nullptr);
  return receive(::torch::empty(meta.shape, ::torch::TensorOptions().dtype(meta.dtype)),
                 fmt::format("{}.f.{}", prefix_, i), waited);
}

void PipelineLink::send_gradient(int i, const Tensor& gradient) {
  send(gradient, fmt::format("{}.b.{}", prefix_, i));
}

Tensor PipelineLink::receive_gradient(int i, const Tensor& activation, double* waited) {
  return receive(::torch::empty_like(activation, ::torch::MemoryFormat::Contiguous),
                 fmt::format("{}.b.{}", prefix_, i), waited);
}

void PipelineLink::finish_sends() {
  auto pending = std::move(sends_);
  sends_.clear();
  for (auto& h : pending) h.wait();
}

}  // namespace lockstep::parallel
