#include "torch/optimizer_names.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>

#include "lockstep/base/error.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch::detail {

void check_parameter_names(const ::torch::optim::Optimizer& optimizer,
                           const std::vector<std::pair<std::string, ::torch::Tensor>>& named) {
  std::map<std::string, size_t> seen;
  std::set<const void*> covered;
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [name, param] = named[i];
    if (auto [it, fresh] = seen.emplace(name, i); !fresh)
      throw InvalidArgument(fmt::format(
          "DistributedOptimizer: the parameter name '{}' is given twice on rank {} (entries {} "
          "and {}); every parameter needs its own name, since the name identifies its "
          "gradient's allreduce",
          name, rank(), it->second, i));
    covered.insert(param.unsafeGetTensorImpl());
  }
  size_t missing = 0;
  std::string first;
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    const auto& params = optimizer.param_groups()[g].params();
    for (size_t p = 0; p < params.size(); ++p) {
      if (!params[p].requires_grad() || covered.count(params[p].unsafeGetTensorImpl())) continue;
      if (missing++ == 0)
        first = fmt::format("parameter {} of group {} (shape [{}])", p, g,
                            fmt::join(params[p].sizes(), ","));
    }
  }
  if (missing > 0)
    throw InvalidArgument(fmt::format(
        "DistributedOptimizer: {} of the optimizer's parameters have no name on rank {}, the "
        "first {}; their gradients would never be averaged. Name every parameter the optimizer "
        "steps (e.g. pass the module, or all of module.named_parameters())",
        missing, rank(), first));
}

}  // namespace lockstep::torch::detail
