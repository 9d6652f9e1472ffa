#include "lockstep/optim/apply_schedule.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::optim {

namespace {

double rate(const Schedule& schedule, int64_t iteration) {
  if (!schedule) throw InvalidArgument("apply(schedule): the schedule is null");
  return schedule->lr_at(iteration);
}

}  // namespace

void apply(const Schedule& schedule, ::torch::optim::Optimizer& optimizer, int64_t iteration) {
  const double lr = rate(schedule, iteration);
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

void apply(const Schedule& schedule, ::torch::optim::Optimizer& optimizer, int64_t iteration,
           const std::vector<double>& ratios) {
  auto& groups = optimizer.param_groups();
  if (ratios.size() != groups.size())
    throw InvalidArgument(fmt::format("apply(schedule): {} ratios for an optimizer with {} groups",
                                      ratios.size(), groups.size()));
  const double lr = rate(schedule, iteration);
  for (size_t k = 0; k < groups.size(); ++k) groups[k].options().set_lr(lr * ratios[k]);
}

std::vector<double> lr_ratios(const ::torch::optim::Optimizer& optimizer) {
  const auto& groups = optimizer.param_groups();
  if (groups.empty()) throw InvalidArgument("lr_ratios: the optimizer has no parameter groups");
  const double base = groups.front().options().get_lr();
  if (base == 0) throw InvalidArgument("lr_ratios: group 0 has lr 0, so the ratios are undefined");
  std::vector<double> ratios;
  for (const auto& group : groups) ratios.push_back(group.options().get_lr() / base);
  return ratios;
}

}  // namespace lockstep::optim
