// Note [ZeRO gather overlap]
// After the shard's step, every rank holds fresh values only for the
// segments it owns; the rest arrive by one all-gather per bucket. Overlapped,
// step() packs the owned values and starts the all-gathers in forward order
// (the bucket holding the first parameters first: buckets are laid out last
// parameter first, Note [ZeRO layout]) and returns; a bucket lands (its
// gathered values are copied into the parameters) when something waits for
// it. LibTorch C++ has no forward pre-hooks, so the waits are explicit:
// forward(net, x) waits per layer, wait_for(module) per module, wait() for
// all, and step() for whatever is left. The engine writes only the gather's
// own output buffer, so a forward that runs too early reads stale values
// rather than racing; a gradient hook catches that (Impl::stale_read) and
// debug builds poison the values in flight with NaN so it cannot go unseen.
// Landing copies what the synchronous path copies, in the same order, so
// the trajectory is bitwise the synchronous one.
#include <fmt/format.h>

#include <limits>
#include <mutex>

#include "lockstep/base/check.h"
#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"
#include "lockstep/torch/collectives.h"
#include "lockstep/torch/placement.h"
#include "parallel/sharded_optimizer_impl.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;
using ::torch::Tensor;

// Like DistributedOptimizer's choice: on one host the all-gather's
// shared-memory copies are CPU work on the engine's thread, so overlapping
// them with the forward only pays with a core to spare.
bool decide_gather_overlap(lt::Overlap requested, const Group& group, bool* forced) {
  const lt::detail::OverlapChoice c = lt::detail::resolve_overlap(requested, group.size());
  *forced = c.forced;
  if (*c.why == '\0') return c.overlap && group.size() > 1;
  static std::once_flag logged;
  std::call_once(logged, [&] {
    if (group.rank() == 0)
      log(LogLevel::kInfo,
          "ShardedOptimizer: parameter all-gather {} (LOCKSTEP_OVERLAP=auto: {}; set on/off to "
          "choose)",
          c.overlap ? "overlaps the next forward where the loop waits per layer"
                    : "completes inside step()",
          c.why);
  });
  return c.overlap;
}

void ShardedOptimizer::Impl::start_gathers(const ShardedOptimizerOptions& o, bool overlapped) {
  ::torch::NoGradGuard no_grad;
  LOCKSTEP_DCHECK(gathers_pending == 0, "{} all-gathers still in flight", gathers_pending);
  for (size_t bi = buckets.size(); bi-- > 0;) {
    const ShardBucket& layout = buckets[bi].layout;
    Tensor mine =
        ::torch::zeros({layout.shard}, ::torch::TensorOptions().dtype(dtype).device(device));
    for (const ShardPlacement& p : layout.placements)
      if (layout.owner(p) == me)
        mine.narrow(0, p.flat_offset - me * layout.shard, p.length)
            .copy_(params[p.param].detach().reshape({-1}).narrow(0, p.param_offset, p.length));
    buckets[bi].gathering =
        lt::allgather_async(mine, fmt::format("{}.ag.{}", o.name, bi), o.group.id());
    ++gathers_pending;
    if (LOCKSTEP_DCHECK_IS_ON && overlapped)  // a forward that reads these too early shows NaN
      for (const ShardPlacement& p : layout.placements)
        if (layout.owner(p) != me)
          params[p.param]
              .detach()
              .view({-1})
              .narrow(0, p.param_offset, p.length)
              .fill_(std::numeric_limits<double>::quiet_NaN());
  }
  if (!overlapped) land_all();
}

void ShardedOptimizer::Impl::land(int bucket) {
  Bucket& b = buckets[bucket];
  if (!b.gathering.valid()) return;
  ::torch::NoGradGuard no_grad;
  Tensor all = b.gathering.result();
  b.gathering = {};
  --gathers_pending;
  for (const ShardPlacement& p : b.layout.placements) {
    if (b.layout.owner(p) == me) continue;
    params[p.param]
        .detach()
        .view({-1})
        .narrow(0, p.param_offset, p.length)
        .copy_(all.narrow(0, p.flat_offset, p.length));
  }
}

// In the order they were started (forward order).
void ShardedOptimizer::Impl::land_all() {
  for (size_t bi = buckets.size(); bi-- > 0 && gathers_pending > 0;) land(static_cast<int>(bi));
}

bool ShardedOptimizer::Impl::gathering(int param) const {
  for (int b : buckets_of[param])
    if (buckets[b].gathering.valid()) return true;
  return false;
}

void ShardedOptimizer::wait_for(const ::torch::nn::Module& module) {
  Impl& m = *impl_;
  m.waits_seen = true;
  if (m.gathers_pending == 0) return;
  for (const Tensor& p : module.parameters()) {
    auto it = m.index.find(p.unsafeGetTensorImpl());
    if (it == m.index.end()) continue;  // not wrapped (frozen, or another optimizer's)
    for (int b : m.buckets_of[it->second]) m.land(b);
  }
}

void ShardedOptimizer::wait() {
  impl_->waits_seen = true;
  impl_->land_all();
}

Tensor ShardedOptimizer::forward(::torch::nn::Sequential& net, Tensor x) {
  for (auto& layer : *net) {
    wait_for(*layer.ptr());
    x = layer.forward(x);
  }
  return x;
}

bool ShardedOptimizer::overlaps_gather() const { return impl_->overlap; }

int ShardedOptimizer::gathers_in_flight() const { return impl_->gathers_pending; }

}  // namespace lockstep::parallel
