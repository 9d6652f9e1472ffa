#include "optim/mirrored_groups.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::optim::detail {

namespace to = ::torch::optim;

std::vector<to::OptimizerParamGroup> clone_groups(const to::Optimizer& optimizer) {
  std::vector<to::OptimizerParamGroup> out;
  for (const auto& g : optimizer.param_groups()) out.emplace_back(g.params(), g.options().clone());
  return out;
}

void push_groups(const to::Optimizer& wrapper, to::Optimizer& inner, std::string_view who) {
  const auto& from = wrapper.param_groups();
  auto& to_groups = inner.param_groups();
  if (to_groups.size() > from.size())
    throw InvalidArgument(fmt::format(
        "{}: the wrapped optimizer has {} parameter groups but the wrapper {}; add groups to the "
        "wrapper (what schedules and DistributedOptimizer see), not to the wrapped optimizer",
        who, to_groups.size(), from.size()));
  for (size_t i = 0; i < from.size(); ++i) {
    if (i < to_groups.size()) {
      to_groups[i].params() = from[i].params();
      to_groups[i].set_options(from[i].options().clone());
    } else {
      inner.add_param_group(to::OptimizerParamGroup(from[i].params(), from[i].options().clone()));
    }
  }
}

void pull_options(to::Optimizer& wrapper, const to::Optimizer& inner) {
  auto& groups = wrapper.param_groups();
  const auto& from = inner.param_groups();
  for (size_t i = 0; i < groups.size() && i < from.size(); ++i)
    groups[i].set_options(from[i].options().clone());
}

}  // namespace lockstep::optim::detail
