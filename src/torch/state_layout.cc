#include "lockstep/torch/state_layout.h"

#include <map>
#include <mutex>

namespace lockstep::torch {
namespace {

struct Marks {
  std::mutex mutex;
  // Guarded by mutex. A multimap: two owners may mark one module.
  std::multimap<const ::torch::nn::Module*, std::string> calls;
};

Marks& marks() {
  static Marks* m = new Marks;  // leaked: marks may be dropped during static destruction
  return *m;
}

std::optional<std::string> mark_of(const ::torch::nn::Module* module) {
  Marks& m = marks();
  std::lock_guard lock(m.mutex);
  auto it = m.calls.find(module);
  if (it == m.calls.end()) return std::nullopt;
  return it->second;
}

}  // namespace

PartialStateMark::PartialStateMark(const ::torch::nn::Module& module, std::string call)
    : module_(&module) {
  Marks& m = marks();
  std::lock_guard lock(m.mutex);
  m.calls.emplace(module_, std::move(call));
}

PartialStateMark::~PartialStateMark() {
  Marks& m = marks();
  std::lock_guard lock(m.mutex);
  auto it = m.calls.find(module_);
  if (it != m.calls.end()) m.calls.erase(it);
}

std::optional<PartialModule> partial_state_of(const ::torch::nn::Module& module) {
  // Itself apart: named_modules(include_self) needs a module owned by a
  // shared_ptr, and a caller's may live on the stack.
  const auto children = module.named_modules("", /*include_self=*/false);
  if (auto call = mark_of(&module)) return PartialModule{"", *call, true};
  for (const auto& item : children)
    if (auto call = mark_of(item.value().get())) return PartialModule{item.key(), *call, true};
  if (const auto* partial = dynamic_cast<const PartialState*>(&module))
    return PartialModule{"", partial->whole_state_call(), false};
  for (const auto& item : children)
    if (const auto* partial = dynamic_cast<const PartialState*>(item.value().get()))
      return PartialModule{item.key(), partial->whole_state_call(), false};
  return std::nullopt;
}

}  // namespace lockstep::torch
