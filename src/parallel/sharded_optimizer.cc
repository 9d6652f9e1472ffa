// Note [ZeRO layout]
// Parameters are grouped into buckets of about bucket_bytes, last parameter
// first (backward's order, so stage 2 can send a bucket while backward goes
// on). A bucket is a flat buffer of N equal segments, segment r owned by
// rank r (shard_layout.h):
//   element granularity: the parameters' concatenation cut into N equal
//     pieces (the last padded); a parameter may straddle two owners;
//   tensor granularity: whole parameters placed greedily on the rank with
//     the fewest elements so far; segments padded to the largest.
// Each rank's optimizer sees "pieces": views of the model's parameters
// covering exactly its segments (1-D slices, or whole tensors with their
// shapes for tensor granularity), whose .grad are views of the bucket's
// reduced gradient shard. The wrapped optimizer steps them in place, i.e.
// directly in the model's parameters; then each bucket's owned values are
// all-gathered and copied into the other ranks' parameters.
// Every rank computes the same layout from the parameter sizes alone, so no
// layout is exchanged; the reduce-scatter and all-gather names are per
// bucket and repeat every step (response-cache hits).
#include "lockstep/parallel/sharded_optimizer.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/function.h>

#include <map>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/parallel/optimizer_state.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/objects.h"
#include "parallel/gradient_hook.h"
#include "parallel/sharded_optimizer_impl.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;
using State = ::torch::optim::OptimizerParamState;

bool is_elementwise(const ::torch::optim::Optimizer& o) {
  return dynamic_cast<const ::torch::optim::SGD*>(&o) ||
         dynamic_cast<const ::torch::optim::Adam*>(&o) ||
         dynamic_cast<const ::torch::optim::AdamW*>(&o) ||
         dynamic_cast<const ::torch::optim::RMSprop*>(&o) ||
         dynamic_cast<const ::torch::optim::Adagrad*>(&o);
}

// The bucket's flat gradient in layout order (zeros where a parameter got none).
Tensor ShardedOptimizer::Impl::pack_gradients(const Bucket& b, bool release) {
  ::torch::NoGradGuard no_grad;
  Tensor flat =
      ::torch::zeros({b.layout.shard * n}, ::torch::TensorOptions().dtype(dtype).device(device));
  for (const ShardPlacement& p : b.layout.placements) {
    const Tensor& grad = params[p.param].grad();
    if (grad.defined())
      flat.narrow(0, p.flat_offset, p.length)
          .copy_(grad.reshape({-1}).narrow(0, p.param_offset, p.length));
  }
  if (release)  // stage 2: the shard is all this rank keeps
    for (int p : b.layout.params) params[p].mutable_grad() = Tensor();
  return flat;
}

void ShardedOptimizer::Impl::send(int bucket, const ShardedOptimizerOptions& o, bool release) {
  Bucket& b = buckets[bucket];
  // reduce_dtype: divided first (DistributedOptimizer's kBf16/kFp16 order), summed.
  Tensor flat = pack_gradients(b, release);
  if (o.reduce_dtype) flat = (flat / n).to(*o.reduce_dtype);
  b.in_flight =
      lt::reduce_scatter_async(flat, fmt::format("{}.rs.{}", o.name, bucket),
                               {.op = o.reduce_dtype ? lt::ReduceOp::kSum : lt::ReduceOp::kAverage,
                                .process_set = o.group.id()});
  b.sent = true;
}

void ShardedOptimizer::Impl::on_gradient(int param, const ShardedOptimizerOptions& o) {
  if (++passes[param] != o.backward_passes_per_step) return;
  for (int bucket : buckets_of[param]) {
    Bucket& b = buckets[bucket];
    if (b.sent)
      throw InvalidArgument(fmt::format(
          "ShardedOptimizer: gradient of {} produced again after its bucket was sent; call step() "
          "once every backward_passes_per_step={} backward passes",
          named[param].first, o.backward_passes_per_step));
    if (++b.ready == static_cast<int>(b.layout.params.size())) send(bucket, o, true);
  }
}

// Pieces are views of the parameters' current storage: rebuilt whenever
// that storage may have been replaced (Module::load swaps it).
void ShardedOptimizer::Impl::bind_pieces(::torch::optim::Optimizer& optimizer) {
  pieces.clear();
  for (size_t b = 0; b < buckets.size(); ++b)
    for (const ShardPlacement& place : buckets[b].layout.placements) {
      if (buckets[b].layout.owner(place) != me) continue;
      Tensor full = params[place.param].detach();
      Tensor view = element ? full.view({-1}).narrow(0, place.param_offset, place.length) : full;
      const int64_t shard_offset = place.flat_offset - me * buckets[b].layout.shard;
      // Paired with plan_shards: the piece lies inside this rank's shard.
      LOCKSTEP_DCHECK(shard_offset >= 0 && shard_offset + place.length <= buckets[b].layout.shard,
                      "ZeRO piece of parameter {} at {} (+{}) outside rank {}'s shard of {}",
                      place.param, shard_offset, place.length, me, buckets[b].layout.shard);
      pieces.push_back({static_cast<int>(b), place, shard_offset, view});
    }
  piece_groups.clear();
  auto& groups = optimizer.param_groups();
  size_t next = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<Tensor> local;
    for (size_t i = 0; i < group_sizes[g]; ++i, ++next)
      for (const auto& piece : pieces)
        if (piece.place.param == group_params[next]) local.push_back(piece.tensor);
    piece_groups.push_back(local);
    groups[g].params() = local;
  }
}

namespace {

void validate(const ShardedOptimizerOptions& o, const ::torch::optim::Optimizer& optimizer) {
  if (o.stage != 1 && o.stage != 2)
    throw InvalidArgument(fmt::format("ShardedOptimizer: stage={} must be 1 or 2", o.stage));
  if (o.reduce_dtype && !c10::isFloatingType(*o.reduce_dtype))
    throw InvalidArgument(fmt::format(
        "ShardedOptimizer: reduce_dtype {} is not a floating type (kBFloat16 or kHalf compress "
        "the gradient reduce-scatter)",
        c10::toString(*o.reduce_dtype)));
  if (o.backward_passes_per_step < 1)
    throw InvalidArgument(fmt::format("ShardedOptimizer: backward_passes_per_step={} must be >= 1",
                                      o.backward_passes_per_step));
  o.group.require_member("ShardedOptimizer");
  if (dynamic_cast<const ::torch::optim::LBFGS*>(&optimizer))
    throw InvalidArgument(
        "ShardedOptimizer: LBFGS steps on the whole parameter vector with a "
        "closure and cannot be sharded; use DistributedOptimizer");
  if (!optimizer.state().empty())
    throw InvalidArgument(
        "ShardedOptimizer: the optimizer already has state; wrap it before its "
        "first step and resume with lockstep::parallel::load_checkpoint");
  if (o.granularity == ShardGranularity::kElement && !is_elementwise(optimizer))
    throw InvalidArgument(
        "ShardedOptimizer: element granularity needs an elementwise optimizer "
        "(SGD, Adam, AdamW, RMSprop, Adagrad); this one may use whole-tensor "
        "norms, so shard by tensor (kTensor or kAuto)");
}

}  // namespace

std::vector<int64_t> ShardedOptimizer::Impl::index_parameters() {
  std::vector<int64_t> numels;
  dtype = named.front().second.scalar_type();
  device = named.front().second.device();
  for (const auto& [name, p] : named) {
    if (p.device() != device)
      throw InvalidArgument(
          fmt::format("ShardedOptimizer: parameter {} is on {} but {} is on {}; "
                      "all must be on one device",
                      name, p.device().str(), named.front().first, device.str()));
    if (!p.is_floating_point() || p.scalar_type() != dtype || !p.is_contiguous())
      throw InvalidArgument(fmt::format(
          "ShardedOptimizer: parameter {} is {} ({}contiguous); all must be contiguous {}", name,
          c10::toString(p.scalar_type()), p.is_contiguous() ? "" : "non-", c10::toString(dtype)));
    index[p.unsafeGetTensorImpl()] = static_cast<int>(params.size());
    params.push_back(p);
    numels.push_back(p.numel());
  }
  return numels;
}

void ShardedOptimizer::Impl::lay_out(const std::vector<int64_t>& numels, size_t bucket_bytes) {
  auto layouts = plan_shards(numels, ::torch::elementSize(dtype), bucket_bytes, n, !element);
  buckets_of.resize(params.size());
  passes.assign(params.size(), 0);
  for (size_t b = 0; b < layouts.size(); ++b) {
    for (int p : layouts[b].params) buckets_of[p].push_back(static_cast<int>(b));
    buckets.push_back({std::move(layouts[b]), Tensor(), {}, 0, false, {}});
  }
}

void ShardedOptimizer::Impl::map_groups(::torch::optim::Optimizer& optimizer) {
  size_t seen = 0;
  for (auto& group : optimizer.param_groups()) {
    for (const Tensor& p : group.params()) {
      auto it = index.find(p.unsafeGetTensorImpl());
      if (it == index.end())
        throw InvalidArgument(
            "ShardedOptimizer: the optimizer updates a parameter that is not in "
            "the wrapped list (wrap every parameter it updates)");
      group_params.push_back(it->second);
      ++seen;
    }
    full_groups.push_back(group.params());
    group_sizes.push_back(group.params().size());
  }
  if (seen != params.size())
    throw InvalidArgument(
        fmt::format("ShardedOptimizer: {} parameters wrapped but the optimizer "
                    "updates {}",
                    params.size(), seen));
}

ShardedOptimizer::ShardedOptimizer(::torch::optim::Optimizer& optimizer,
                                   const ::torch::nn::Module& module,
                                   ShardedOptimizerOptions options)
    : ShardedOptimizer(optimizer, trainable_parameters(module), std::move(options)) {}

ShardedOptimizer::ShardedOptimizer(::torch::optim::Optimizer& optimizer, NamedParameters named,
                                   ShardedOptimizerOptions options)
    : optimizer_(&optimizer), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  validate(options_, optimizer);
  Impl& m = *impl_;
  m.n = options_.group.size();
  m.me = options_.group.rank();
  m.named = std::move(named);
  if (m.named.empty()) throw InvalidArgument("ShardedOptimizer: no parameters");
  const std::vector<int64_t> numels = m.index_parameters();
  m.element = options_.granularity == ShardGranularity::kElement ||
              (options_.granularity == ShardGranularity::kAuto && is_elementwise(optimizer));
  m.lay_out(numels, options_.bucket_bytes);
  m.map_groups(optimizer);
  m.bind_pieces(optimizer);
  m.overlap = decide_gather_overlap(options_.gather_overlap, options_.group, &m.overlap_forced);
  if ((options_.stage == 2 || m.overlap) && m.n > 1)
    for (size_t p = 0; p < m.params.size(); ++p) {
      auto node = ::torch::autograd::impl::grad_accumulator(m.params[p]);
      if (!node)
        throw InvalidArgument(
            fmt::format("ShardedOptimizer: {} is not a leaf requiring grad", m.named[p].first));
      const int param = static_cast<int>(p);
      uintptr_t key = node->add_post_hook(
          std::make_unique<detail::GradientReadyHook>([this, param] { on_gradient_ready(param); }));
      m.hooks.emplace_back(node, key);
    }
}

ShardedOptimizer::~ShardedOptimizer() {
  for (auto& [node, key] : impl_->hooks) node->del_post_hook(key);
  for (auto& b : impl_->buckets) {
    for (auto* handle : {&b.in_flight, &b.gathering}) {
      try {
        if (handle->valid()) handle->wait();
      } catch (...) {  // the failed step already reported it
      }
    }
  }
  auto& groups = optimizer_->param_groups();
  for (size_t g = 0; g < groups.size() && g < impl_->full_groups.size(); ++g)
    groups[g].params() = impl_->full_groups[g];
}

void ShardedOptimizer::zero_grad() {
  for (auto& p : impl_->params) p.mutable_grad() = Tensor();
  for (auto& piece : impl_->pieces) piece.tensor.mutable_grad() = Tensor();
  for (auto& b : impl_->buckets) {
    b.grad_shard = Tensor();
    b.ready = 0;
    b.sent = false;
  }
  std::fill(impl_->passes.begin(), impl_->passes.end(), 0);
}

// Backward produced this parameter's gradient (a hook on its accumulator).
void ShardedOptimizer::on_gradient_ready(int param) {
  Impl& m = *impl_;
  if (m.stale_read.empty() && m.gathering(param)) m.stale_read = m.named[param].first;
  if (options_.stage == 2) m.on_gradient(param, options_);
}

void ShardedOptimizer::step() {
  Impl& m = *impl_;
  if (!m.stale_read.empty()) {
    const std::string name = std::exchange(m.stale_read, {});
    m.land_all();
    throw InvalidArgument(fmt::format(
        "ShardedOptimizer: the forward read {} while its all-gather from the previous step() was "
        "still in flight (gather_overlap is on); run the forward through zero.forward(net, x), "
        "call zero.wait_for(module) before each module or zero.wait() before the forward, or set "
        "gather_overlap = Overlap::kOff (LOCKSTEP_OVERLAP=off)",
        name));
  }
  m.land_all();
  if (m.n > 1) {
    for (size_t b = 0; b < m.buckets.size(); ++b)
      if (!m.buckets[b].sent) m.send(static_cast<int>(b), options_, options_.stage == 2);
    for (auto& b : m.buckets) {
      b.grad_shard = b.in_flight.result().to(m.dtype);  // from reduce_dtype
      b.in_flight = {};
      // What the reduce-scatter returns is the shard bind_pieces sliced.
      LOCKSTEP_DCHECK_EQ(b.grad_shard.numel(), b.layout.shard, "ZeRO gradient shard");
    }
  } else {
    for (auto& b : m.buckets) b.grad_shard = m.pack_gradients(b, options_.stage == 2);
  }
  for (auto& piece : m.pieces) {
    Tensor g = m.buckets[piece.bucket].grad_shard.narrow(0, piece.shard_offset, piece.place.length);
    piece.tensor.mutable_grad() = m.element ? g : g.view(piece.tensor.sizes());
  }
  optimizer_->step();
  if (m.n > 1) m.start_gathers(options_, m.overlap && (m.overlap_forced || m.waits_seen));
  for (auto& b : m.buckets) {
    b.ready = 0;
    b.sent = false;
  }
  std::fill(m.passes.begin(), m.passes.end(), 0);
}

bool ShardedOptimizer::element_granularity() const { return impl_->element; }

int64_t ShardedOptimizer::state_bytes() const { return optimizer_state_bytes(*optimizer_); }

int64_t ShardedOptimizer::shard_elements() const {
  int64_t n = 0;
  for (const auto& piece : impl_->pieces) n += piece.place.length;
  return n;
}

int64_t ShardedOptimizer::gradient_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : impl_->params)
    if (p.grad().defined()) bytes += p.grad().numel() * p.grad().element_size();
  for (const auto& b : impl_->buckets)
    if (b.grad_shard.defined()) bytes += b.grad_shard.numel() * b.grad_shard.element_size();
  return bytes;
}

int64_t ShardedOptimizer::max_bucket_bytes() const {
  int64_t most = 0;
  for (const auto& b : impl_->buckets)
    most = std::max(
        most, b.layout.shard * impl_->n * static_cast<int64_t>(::torch::elementSize(impl_->dtype)));
  return most;
}

const ShardedOptimizer::NamedParameters& ShardedOptimizer::parameters() const {
  return impl_->named;
}

}  // namespace lockstep::parallel
