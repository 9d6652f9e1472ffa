// Note [Pipeline transfers]
// Neighbouring stages s and s+1 share a two-rank process set (created for
// every pipeline group of the job at construction). A transfer is a
// broadcast in that set rooted at the sender: the engine negotiates it by
// name, so sends are asynchronous (submitted and left in flight) and the two
// stages may post their halves in any order, which is what lets GPipe and
// 1F1B interleave sends and receives without deadlock. Names repeat every
// step ("<prefix>.f.<micro-batch>", ".b." for gradients), so after the first
// step they are response-cache hits: one small negotiation allreduce plus
// the payload per transfer.
//
// Shapes: stage 0 broadcasts the batch size to the whole pipeline group each
// step (8 bytes), from which every stage derives the micro-batch sizes. The
// first time stage s sends a micro-batch of a given size it sends its
// activation's dtype and shape first (".meta.<rows>"); both sides cache
// them, later sends are checked against the cache before they leave (an
// InvalidArgument naming stage, micro-batch and both shapes) and the engine
// compares the two ranks' shapes again (MismatchError). Gradients have the
// shape of the activation they belong to.
//
// Failure: a dead rank fails the engine (PeerFailure naming it) in every
// process set, so a stage blocked on any receive throws; nothing waits for
// a timeout.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <map>
#include <set>

#include "lockstep/base/error.h"
#include "lockstep/parallel/pipeline.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/objects.h"
#include "lockstep/torch/state_layout.h"
#include "parallel/pipeline_link.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int64_t bytes_of(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

std::vector<int64_t> micro_batch_rows(int64_t batch, int m) {
  std::vector<int64_t> rows(static_cast<size_t>(m));
  for (int i = 0; i < m; ++i) rows[i] = batch / m + (i < batch % m ? 1 : 0);
  return rows;
}

int64_t parameter_count(const ::torch::nn::AnyModule& layer) {
  int64_t n = 0;
  for (const auto& p : layer.ptr()->parameters()) n += p.numel();
  return n;
}

}  // namespace

struct Pipeline::Impl {
  PipelineOptions options;
  std::vector<std::pair<int, int>> ranges;  // per stage: first layer, count
  ::torch::nn::Sequential stage_module;
  std::vector<std::string> layer_names;  // whole-model names of this stage's layers
  // Every module of this stage's layers, marked so that a one-rank save of
  // the stage's (or the whole model's) module is refused, naming the
  // Pipeline overload: each rank trains only its stage. After stage_module,
  // which keeps the marked modules alive, so the marks go first.
  std::vector<std::unique_ptr<lt::PartialStateMark>> marks;
  std::unique_ptr<PipelineLink> prev, next;
  PipelineStepStats stats;
  int64_t in_flight_bytes = 0;

  int stage() const { return options.group.rank(); }
  int stages() const { return options.group.size(); }
  bool first() const { return stage() == 0; }
  bool last() const { return stage() == stages() - 1; }

  void place(::torch::nn::Sequential model);
  void connect();
  int64_t agree_batch(const Tensor& input, const char* what);
  Tensor run_layers(Tensor x, int64_t* activation_bytes);
  double step(const Tensor& input, const Tensor& target, const LossFunction* loss,
              std::vector<Tensor>* outputs);

  // One step's micro-batches as they pass through this stage (step()).
  struct MicroBatches {
    MicroBatches(const Tensor& input, const Tensor& target, const LossFunction* loss,
                 std::vector<Tensor>* outputs)
        : input(input), target(target), loss(loss), outputs(outputs) {}
    const Tensor& input;
    const Tensor& target;
    const LossFunction* loss;      // null: inference
    std::vector<Tensor>* outputs;  // inference on the last stage: collected here
    int64_t batch = 0;
    std::vector<int64_t> rows, offset;  // per micro-batch
    std::vector<Tensor> inputs, outs;   // kept from forward for backward
    std::vector<int64_t> held;          // activation bytes each holds
    double total_loss = 0;
    bool training() const { return loss != nullptr; }
  };
  MicroBatches cut_batch(const Tensor& input, const Tensor& target, const LossFunction* loss,
                         std::vector<Tensor>* outputs);
  void forward_micro_batch(MicroBatches& mb, int i);
  void backward_micro_batch(MicroBatches& mb, int i);
};

void Pipeline::Impl::place(::torch::nn::Sequential model) {
  const int n = static_cast<int>(model->size());
  std::vector<int> sizes = options.partition;
  if (sizes.empty()) {
    std::vector<int64_t> params;
    for (const auto& layer : *model) params.push_back(parameter_count(layer));
    sizes = balance_by_parameters(params, stages());
  }
  int total = 0;
  for (int s : sizes) {
    if (s < 1)
      throw InvalidArgument(
          fmt::format("Pipeline: partition [{}] gives a stage no layer", fmt::join(sizes, ",")));
    total += s;
  }
  if (static_cast<int>(sizes.size()) != stages() || total != n)
    throw InvalidArgument(fmt::format(
        "Pipeline: partition [{}] must have one entry per stage ({}) adding up to the model's {} "
        "layers",
        fmt::join(sizes, ","), stages(), n));
  for (int s = 0, first_layer = 0; s < stages(); first_layer += sizes[s++])
    ranges.emplace_back(first_layer, sizes[s]);
  auto names = model->named_children().keys();
  auto [begin, count] = ranges[stage()];
  for (int i = begin; i < begin + count; ++i) {
    stage_module->push_back(names[i], *(model->begin() + i));
    layer_names.push_back(names[i]);
  }
  for (const auto& item : stage_module->named_modules("", /*include_self=*/false))
    marks.push_back(std::make_unique<lt::PartialStateMark>(
        *item.value(),
        "lockstep::parallel::save_checkpoint/load_checkpoint(path, pipeline, "
        "optimizer, progress), or CheckpointWriter::save(pipeline, ...)/"
        "load_checkpoint_dir(root, pipeline, ...), with the Pipeline"));
}

// Every rank learns every pipeline group (one allgather over the job) and
// creates the neighbour pairs of all of them in the same order.
void Pipeline::Impl::connect() {
  std::vector<int> mine = options.group.ranks();
  std::set<std::vector<int>> groups;
  for (const std::string& bytes : lt::allgather_bytes(
           std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(int)),
           options.name + ".layout"))
    groups.insert(lt::detail::pod_values<int>(bytes));
  // Pairs are reused by later pipelines over the same ranks: every rank
  // builds the same pipelines in the same order, so the caches agree.
  static std::map<std::pair<int, int>, Group> pairs;
  for (const auto& g : groups)
    for (size_t i = 0; i + 1 < g.size(); ++i) {
      auto [it, fresh] = pairs.try_emplace({g[i], g[i + 1]});
      if (fresh) it->second = Group::create({g[i], g[i + 1]});
      const Group& pair = it->second;
      if (g != mine) continue;
      if (static_cast<int>(i) + 1 == stage())
        prev = std::make_unique<PipelineLink>(pair, options.name);
      if (static_cast<int>(i) == stage()) next = std::make_unique<PipelineLink>(pair, options.name);
    }
}

int64_t Pipeline::Impl::agree_batch(const Tensor& input, const char* what) {
  int64_t batch = first() ? (input.defined() && input.dim() > 0 ? input.size(0) : -1) : 0;
  if (first() && batch < 0)
    throw InvalidArgument(
        fmt::format("Pipeline::{}: stage 0 needs an input with a batch "
                    "dimension",
                    what));
  if (stages() > 1) {
    auto t = ::torch::tensor({batch}, ::torch::kInt64);
    lt::broadcast_(t, 0, options.name + ".batch", options.group.id());
    batch = t.item<int64_t>();
  }
  if (batch < options.micro_batches)
    throw InvalidArgument(
        fmt::format("Pipeline::{}: a batch of {} cannot be cut into {} "
                    "micro-batches",
                    what, batch, options.micro_batches));
  return batch;
}

Tensor Pipeline::Impl::run_layers(Tensor x, int64_t* activation_bytes) {
  for (auto& layer : *stage_module) {
    x = layer.forward(x);
    *activation_bytes += bytes_of(x);
  }
  return x;
}

// The batch agreed with stage 0, the target checked, and the rows and
// offsets of the micro-batches.
Pipeline::Impl::MicroBatches Pipeline::Impl::cut_batch(const Tensor& input, const Tensor& target,
                                                       const LossFunction* loss,
                                                       std::vector<Tensor>* outputs) {
  MicroBatches mb(input, target, loss, outputs);
  const int m = options.micro_batches;
  mb.batch = agree_batch(input, mb.training() ? "train_step" : "forward");
  if (mb.training() && last() &&
      (!target.defined() || target.dim() == 0 || target.size(0) != mb.batch))
    throw InvalidArgument(fmt::format(
        "Pipeline::train_step: the last stage needs a target with {} rows (the batch stage 0 "
        "has), got {}",
        mb.batch, target.defined() ? c10::str(target.sizes()) : "none"));
  mb.rows = micro_batch_rows(mb.batch, m);
  mb.offset.assign(m, 0);
  for (int i = 1; i < m; ++i) mb.offset[i] = mb.offset[i - 1] + mb.rows[i - 1];
  mb.inputs.resize(m);
  mb.outs.resize(m);
  mb.held.assign(m, 0);
  return mb;
}

// Micro-batch i through this stage's layers: received from the previous
// stage (or cut from the input), its loss on the last stage when training,
// sent on to the next.
void Pipeline::Impl::forward_micro_batch(MicroBatches& mb, int i) {
  const bool training = mb.training();
  Tensor x = first() ? mb.input.narrow(0, mb.offset[i], mb.rows[i])
                     : prev->receive_activation(i, mb.rows[i], &stats.receive_wait_seconds);
  if (training && !first() && x.is_floating_point()) x.requires_grad_(true);
  const auto t0 = Clock::now();
  Tensor y = run_layers(x, &mb.held[i]);
  if (training && last()) {
    Tensor l = (*mb.loss)(y, mb.target.narrow(0, mb.offset[i], mb.rows[i])) *
               (static_cast<double>(mb.rows[i]) / static_cast<double>(mb.batch));
    mb.total_loss += l.item<double>();
    y = l;
  }
  stats.compute_seconds += seconds_since(t0);
  in_flight_bytes += mb.held[i];
  stats.peak_activation_bytes = std::max(stats.peak_activation_bytes, in_flight_bytes);
  if (!last()) next->send_activation(i, mb.rows[i], y.detach());
  if (!training) {
    if (last()) mb.outputs->push_back(y);
    in_flight_bytes -= mb.held[i];
    return;
  }
  mb.inputs[i] = x;
  mb.outs[i] = y;
}

// Its gradient back: received from the next stage (the loss's own on the
// last), through this stage's layers, sent on to the previous.
void Pipeline::Impl::backward_micro_batch(MicroBatches& mb, int i) {
  Tensor grad =
      last() ? Tensor() : next->receive_gradient(i, mb.outs[i], &stats.receive_wait_seconds);
  const auto t0 = Clock::now();
  if (mb.outs[i].requires_grad()) {
    if (last())
      mb.outs[i].backward();
    else
      ::torch::autograd::backward({mb.outs[i]}, {grad});
  }
  stats.compute_seconds += seconds_since(t0);
  if (!first()) {
    Tensor g = mb.inputs[i].grad();
    prev->send_gradient(i, g.defined() ? g : ::torch::zeros_like(mb.inputs[i]));
  }
  mb.inputs[i] = Tensor();
  mb.outs[i] = Tensor();
  in_flight_bytes -= mb.held[i];
}

// One pass over the schedule. With `loss`: training (forward and backward);
// without: inference, outputs collected on the last stage.
double Pipeline::Impl::step(const Tensor& input, const Tensor& target, const LossFunction* loss,
                            std::vector<Tensor>* outputs) {
  const auto start = Clock::now();
  stats = {};
  in_flight_bytes = 0;
  MicroBatches mb = cut_batch(input, target, loss, outputs);
  const int m = options.micro_batches;
  auto schedule = mb.training() ? pipeline_schedule(options.schedule, stage(), stages(), m)
                                : pipeline_schedule(Schedule::kGPipe, stage(), stages(), m);
  for (const PipelineAction& action : schedule) {
    if (!mb.training() && !action.forward) continue;  // inference: forward passes only
    if (action.forward)
      forward_micro_batch(mb, action.micro_batch);
    else
      backward_micro_batch(mb, action.micro_batch);
  }
  if (prev) prev->finish_sends();
  if (next) next->finish_sends();
  stats.step_seconds = seconds_since(start);
  return mb.total_loss;
}

Pipeline::Pipeline(::torch::nn::Sequential model, PipelineOptions options)
    : impl_(std::make_unique<Impl>()) {
  options.group.require_member("Pipeline");
  if (options.micro_batches < 1)
    throw InvalidArgument(
        fmt::format("Pipeline: micro_batches={} must be >= 1", options.micro_batches));
  impl_->options = std::move(options);
  impl_->place(std::move(model));
  impl_->connect();
}

namespace {

// A Sequential with a plain forward(Tensor), so it can be one layer of another.
struct StageModuleImpl : ::torch::nn::SequentialImpl {
  explicit StageModuleImpl(const ::torch::nn::Sequential& layers) {
    auto names = layers->named_children().keys();
    size_t i = 0;
    for (const auto& layer : *layers) push_back(names[i++], layer);
  }
  Tensor forward(Tensor x) { return ::torch::nn::SequentialImpl::forward(std::move(x)); }
};

::torch::nn::Sequential join_stages(std::vector<::torch::nn::Sequential>& stages) {
  ::torch::nn::Sequential whole;
  for (size_t s = 0; s < stages.size(); ++s)
    whole->push_back(std::to_string(s), std::make_shared<StageModuleImpl>(stages[s]));
  return whole;
}

}  // namespace

Pipeline::Pipeline(std::vector<::torch::nn::Sequential> stages, PipelineOptions options)
    : Pipeline(join_stages(stages), [&] {
        if (static_cast<int>(stages.size()) != options.group.size())
          throw InvalidArgument(fmt::format("Pipeline: {} stage modules for a group of {} ranks",
                                            stages.size(), options.group.size()));
        options.partition.assign(stages.size(), 1);
        return options;
      }()) {}

Pipeline::~Pipeline() = default;

double Pipeline::train_step(const Tensor& input, const Tensor& target, const LossFunction& loss) {
  if (!loss) throw InvalidArgument("Pipeline::train_step: no loss function");
  return impl_->step(input, target, &loss, nullptr);
}

Tensor Pipeline::forward(const Tensor& input) {
  ::torch::NoGradGuard no_grad;
  std::vector<Tensor> outputs;
  impl_->step(input, Tensor(), nullptr, &outputs);
  return impl_->last() ? ::torch::cat(outputs) : Tensor();
}

int Pipeline::stage() const { return impl_->stage(); }
int Pipeline::num_stages() const { return impl_->stages(); }
std::pair<int, int> Pipeline::layers_of(int stage) const { return impl_->ranges.at(stage); }
::torch::nn::Sequential& Pipeline::module() { return impl_->stage_module; }
const PipelineStepStats& Pipeline::last_step() const { return impl_->stats; }
const PipelineOptions& Pipeline::options() const { return impl_->options; }

std::vector<Tensor> Pipeline::parameters() const { return impl_->stage_module->parameters(); }

std::vector<std::pair<std::string, Tensor>> Pipeline::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& item : impl_->stage_module->named_parameters())
    out.emplace_back(item.key(), item.value());
  return out;
}

std::vector<std::pair<std::string, Tensor>> Pipeline::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& item : impl_->stage_module->named_buffers())
    out.emplace_back(item.key(), item.value());
  return out;
}

}  // namespace lockstep::parallel
