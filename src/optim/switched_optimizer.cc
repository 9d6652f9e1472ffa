#include "lockstep/optim/switched_optimizer.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "optim/mirrored_groups.h"

namespace lockstep::optim {

namespace to = ::torch::optim;

namespace {

const to::Optimizer& checked(const std::shared_ptr<to::Optimizer>& first,
                             const std::shared_ptr<to::Optimizer>& second, OptimizerSwitch when) {
  if (!first || !second)
    throw InvalidArgument("SwitchedOptimizer: both optimizers must be given (got a null one)");
  if (when.switch_epoch < 0)
    throw InvalidArgument(
        fmt::format("SwitchedOptimizer: switch_epoch must be >= 0, got {}", when.switch_epoch));
  const auto &a = first->param_groups(), &b = second->param_groups();
  bool same = a.size() == b.size();
  for (size_t g = 0; same && g < a.size(); ++g) {
    same = a[g].params().size() == b[g].params().size();
    for (size_t i = 0; same && i < a[g].params().size(); ++i)
      same = a[g].params()[i].unsafeGetTensorImpl() == b[g].params()[i].unsafeGetTensorImpl();
  }
  if (!same)
    throw InvalidArgument(
        "SwitchedOptimizer: both optimizers must hold the same parameters in the same groups");
  return when.second_active(0) ? *second : *first;
}

}  // namespace

SwitchedOptimizer::SwitchedOptimizer(std::shared_ptr<to::Optimizer> first,
                                     std::shared_ptr<to::Optimizer> second, OptimizerSwitch when)
    : to::Optimizer(detail::clone_groups(checked(first, second, when)),
                    checked(first, second, when).defaults().clone()),
      first_(std::move(first)),
      second_(std::move(second)),
      when_(when),
      second_mirrored_(when_.second_active(0)) {}

to::Optimizer& SwitchedOptimizer::active(int64_t epoch) const {
  return when_.second_active(epoch) ? *second_ : *first_;
}

void SwitchedOptimizer::mirror(bool second) {
  if (second == second_mirrored_) return;
  detail::push_groups(*this, mirrored(), "SwitchedOptimizer");  // keep what was set on it
  second_mirrored_ = second;
  detail::pull_options(*this, mirrored());
}

void SwitchedOptimizer::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  mirror(when_.second_active(epoch));
}

::torch::Tensor SwitchedOptimizer::step(LossClosure closure) {
  detail::push_groups(*this, mirrored(), "SwitchedOptimizer");
  return mirrored().step(std::move(closure));
}

void SwitchedOptimizer::save(::torch::serialize::OutputArchive& archive) const {
  detail::push_groups(*this, mirrored(), "SwitchedOptimizer");
  ::torch::serialize::OutputArchive a, b;
  first_->save(a);
  second_->save(b);
  archive.write("first", a);
  archive.write("second", b);
  archive.write("epoch", ::torch::tensor(epoch_, ::torch::kInt64));
}

void SwitchedOptimizer::load(::torch::serialize::InputArchive& archive) {
  ::torch::serialize::InputArchive a, b;
  ::torch::Tensor epoch;
  archive.read("first", a);
  archive.read("second", b);
  archive.read("epoch", epoch);
  first_->state().clear();  // load() merges: state the archive lacks would stay
  second_->state().clear();
  first_->load(a);
  second_->load(b);
  epoch_ = epoch.item<int64_t>();
  second_mirrored_ = when_.second_active(epoch_);
  detail::pull_options(*this, mirrored());
}

}  // namespace lockstep::optim
