#include "lockstep/torch/state_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "lockstep/base/error.h"

namespace lockstep::torch {
namespace {

std::string describe(const TensorInfo& t) {
  const std::string shape =
      t.sizes.empty() ? std::string("scalar") : fmt::format("{}", fmt::join(t.sizes, "x"));
  return fmt::format("{} {}", shape, c10::toString(t.dtype));
}

// First entry of `a` whose name `b` lacks, and how many there are.
std::pair<const TensorInfo*, size_t> first_absent(
    const std::vector<TensorInfo>& a, const std::map<std::string, const TensorInfo*>& b) {
  const TensorInfo* first = nullptr;
  size_t count = 0;
  for (const TensorInfo& t : a)
    if (!b.count(t.name)) {
      if (!first) first = &t;
      ++count;
    }
  return {first, count};
}

std::map<std::string, const TensorInfo*> by_name(const std::vector<TensorInfo>& infos,
                                                 const std::string& side, const std::string& what) {
  std::map<std::string, const TensorInfo*> out;
  for (const TensorInfo& t : infos)
    if (!out.emplace(t.name, &t).second)
      throw Error(fmt::format("{}: {} holds '{}' twice", what, side, t.name));
  return out;
}

}  // namespace

std::vector<TensorInfo> tensor_infos(const ::torch::nn::Module& module) {
  std::vector<TensorInfo> out;
  for (const auto& item : module.named_parameters())
    out.push_back({item.key(), item.value().scalar_type(), item.value().sizes().vec()});
  for (const auto& item : module.named_buffers())
    out.push_back({item.key(), item.value().scalar_type(), item.value().sizes().vec()});
  return out;
}

void check_state_matches(const std::vector<TensorInfo>& model, const std::vector<TensorInfo>& found,
                         const std::string& what, const StateCheckOptions& options) {
  const auto model_names = by_name(model, "the model", what);
  const auto found_names = by_name(found, "the file", what);
  std::vector<std::string> problems;
  size_t differing = 0;
  for (const TensorInfo& mine : model) {
    auto it = found_names.find(mine.name);
    if (it == found_names.end()) continue;
    const TensorInfo& theirs = *it->second;
    const bool shape = mine.sizes != theirs.sizes;
    const bool dtype = options.dtypes && mine.dtype != theirs.dtype;
    if (!shape && !dtype) continue;
    if (differing++ == 0)
      problems.push_back(fmt::format("'{}' is {} in the file but {} in the model", mine.name,
                                     describe(theirs), describe(mine)));
  }
  if (differing > 1) problems.back() += fmt::format(" ({} tensors differ)", differing);
  if (auto [missing, count] = first_absent(model, found_names); missing)
    problems.push_back(fmt::format("the file lacks the model's '{}' ({} of {} missing)",
                                   missing->name, count, model.size()));
  if (!options.extra_ok)
    if (auto [extra, count] = first_absent(found, model_names); extra)
      problems.push_back(
          fmt::format("the file has '{}', which the model lacks ({} extra)", extra->name, count));
  if (problems.empty()) return;
  throw Error(
      fmt::format("{} does not match the model: {}. It was written for another "
                  "architecture (or another dtype): build the model it was saved from, "
                  "or load another file; nothing was loaded",
                  what, fmt::join(problems, "; ")));
}

}  // namespace lockstep::torch
