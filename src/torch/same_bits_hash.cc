// state_hash: the full training state (parameters, buffers, optimizer state)
// as one FNV-1a 64 value, so runs at different world sizes can be compared
// bit for bit (include/lockstep/torch/same_bits.h).
#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/torch/same_bits.h"

namespace lockstep::torch {
// Named, because the unity build puts several files in one translation unit.
namespace same_bits_hash_impl {
namespace {

class Fnv {
 public:
  void bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ULL;
  }
  void text(const std::string& s) { bytes(s.data(), s.size() + 1); }
  void tensor(const std::string& name, const ::torch::Tensor& t) {
    text(name);
    if (!t.defined()) return text("<undefined>");
    text(std::string(c10::toString(t.scalar_type())));
    for (int64_t d : t.sizes()) bytes(&d, sizeof d);
    const auto c = t.detach().cpu().contiguous();
    bytes(c.data_ptr(), c.numel() * c.element_size());
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

// Adam and AdamW keep the same fields in two unrelated types.
template <class State>
void hash_adam_state(Fnv& fnv, const std::string& name, const State& s) {
  const int64_t step = s.step();
  fnv.bytes(&step, sizeof step);
  fnv.tensor(name + ".exp_avg", s.exp_avg());
  fnv.tensor(name + ".exp_avg_sq", s.exp_avg_sq());
  fnv.tensor(name + ".max_exp_avg_sq", s.max_exp_avg_sq());
}

// The per-parameter state of the optimizers whose state types we know.
void hash_param_state(Fnv& fnv, const std::string& name,
                      const ::torch::optim::OptimizerParamState& state) {
  namespace o = ::torch::optim;
  if (const auto* s = dynamic_cast<const o::SGDParamState*>(&state)) {
    fnv.tensor(name + ".momentum_buffer", s->momentum_buffer());
  } else if (const auto* a = dynamic_cast<const o::AdamParamState*>(&state)) {
    hash_adam_state(fnv, name, *a);
  } else if (const auto* w = dynamic_cast<const o::AdamWParamState*>(&state)) {
    hash_adam_state(fnv, name, *w);
  } else {
    throw InvalidArgument(fmt::format(
        "state_hash: the optimizer state of '{}' is of a type it does not know; it hashes "
        "SGD, Adam and AdamW state",
        name));
  }
}

}  // namespace
}  // namespace same_bits_hash_impl

uint64_t state_hash(const ::torch::nn::Module& model, const ::torch::optim::Optimizer& optimizer) {
  same_bits_hash_impl::Fnv fnv;
  for (const auto& item : model.named_parameters()) fnv.tensor(item.key(), item.value());
  for (const auto& item : model.named_buffers()) fnv.tensor(item.key(), item.value());
  const auto& state = optimizer.state();
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto name = fmt::format("optimizer.{}.{}", g, i);
      auto it = state.find(c10::guts::to_string(params[i].unsafeGetTensorImpl()));
      if (it == state.end()) {
        fnv.text(name + "<no state>");
        continue;
      }
      same_bits_hash_impl::hash_param_state(fnv, name, *it->second);
    }
  }
  return fnv.value();
}

std::string state_hash_hex(const ::torch::nn::Module& model,
                           const ::torch::optim::Optimizer& optimizer) {
  return fmt::format("{:016x}", state_hash(model, optimizer));
}

}  // namespace lockstep::torch
