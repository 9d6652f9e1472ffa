#include "lockstep/parallel/optimizer_state.h"

#include "lockstep/torch/objects.h"

namespace lockstep::parallel {

std::string serialize_state(const ::torch::optim::OptimizerParamState& state) {
  ::torch::serialize::OutputArchive out;
  state.serialize(out);
  return lockstep::torch::archive_to_bytes(out);
}

StateValues parse_state(const std::string& bytes) {
  ::torch::serialize::InputArchive in;
  lockstep::torch::archive_from_bytes(in, bytes);
  StateValues values;
  for (const std::string& key : in.keys()) {
    c10::IValue value;
    in.read(key, value);
    values.emplace_back(key, std::move(value));
  }
  return values;
}

StateValues state_values(const ::torch::optim::OptimizerParamState& state) {
  return parse_state(serialize_state(state));
}

std::unique_ptr<::torch::optim::OptimizerParamState> state_from_values(
    const ::torch::optim::OptimizerParamState& prototype, const StateValues& values) {
  ::torch::serialize::OutputArchive out;
  for (const auto& [key, value] : values) out.write(key, value);
  ::torch::serialize::InputArchive in;
  lockstep::torch::archive_from_bytes(in, lockstep::torch::archive_to_bytes(out));
  auto state = prototype.clone();
  state->serialize(in);
  return state;
}

OptimizerStateKey state_key(const ::torch::Tensor& param) { return optim::state_key(param); }

std::vector<std::pair<std::string, ::torch::Tensor>> trainable_parameters(
    const ::torch::nn::Module& module) {
  std::vector<std::pair<std::string, ::torch::Tensor>> named;
  for (const auto& item : module.named_parameters())
    if (item.value().requires_grad()) named.emplace_back(item.key(), item.value());
  return named;
}

int64_t optimizer_state_bytes(const ::torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state())
    for (const auto& [name, value] : state_values(*state))
      if (value.isTensor() && value.toTensor().defined())
        bytes += value.toTensor().numel() * static_cast<int64_t>(value.toTensor().element_size());
  return bytes;
}

}  // namespace lockstep::parallel
