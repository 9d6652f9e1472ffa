#include "lockstep/parallel/checkpoint.h"

namespace lockstep::parallel {

namespace lt = lockstep::torch;

void save_checkpoint(const std::string& path, const ::torch::nn::Module& module,
                     ShardedOptimizer& optimizer, const lt::TrainingProgress& progress) {
  auto full = optimizer.gather_full_state();
  optimizer.with_full_view(
      std::move(full), [&] { lt::save_checkpoint(path, module, optimizer.optimizer(), progress); });
}

bool load_checkpoint(const std::string& path, ::torch::nn::Module& module,
                     ShardedOptimizer& optimizer, lt::TrainingProgress& progress) {
  bool found = false;
  auto full = optimizer.with_full_view(
      {}, [&] { found = lt::load_checkpoint(path, module, optimizer.optimizer(), progress); });
  if (!found) return false;
  optimizer.rebind();  // Module::load gave the parameters new storage
  optimizer.scatter_full_state(full);
  return true;
}

}  // namespace lockstep::parallel
