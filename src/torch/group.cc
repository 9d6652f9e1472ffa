#include "lockstep/torch/group.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "lockstep/base/error.h"
#include "lockstep/engine/engine.h"
#include "lockstep/torch/collectives.h"

namespace lockstep::torch {

struct Group::Data {
  int id = 0;
  std::vector<int> ranks;  // ascending
  int my_rank = -1;
};

Group Group::create(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty()) throw InvalidArgument("Group::create: the rank list is empty");
  if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end())
    throw InvalidArgument(
        fmt::format("Group::create: a rank is listed twice in [{}]", fmt::join(ranks, ",")));
  const int world = torch::size();
  if (ranks.front() < 0 || ranks.back() >= world)
    throw InvalidArgument(
        fmt::format("Group::create: ranks [{}] must lie in [0, {}) (the job has "
                    "{} rank(s))",
                    fmt::join(ranks, ","), world, world));
  if (static_cast<int>(ranks.size()) == world) return Group();
  auto data = std::make_shared<Data>();
  data->id = engine::global().add_process_set(ranks);
  auto me = std::find(ranks.begin(), ranks.end(), torch::rank());
  data->my_rank = me == ranks.end() ? -1 : static_cast<int>(me - ranks.begin());
  data->ranks = std::move(ranks);
  return Group(std::move(data));
}

int Group::id() const { return data_ ? data_->id : 0; }
int Group::size() const { return data_ ? static_cast<int>(data_->ranks.size()) : torch::size(); }
int Group::rank() const { return data_ ? data_->my_rank : torch::rank(); }

int Group::global_rank(int group_rank) const {
  if (group_rank < 0 || group_rank >= size())
    throw InvalidArgument(
        fmt::format("Group {}: rank {} is out of range [0, {})", describe(), group_rank, size()));
  return data_ ? data_->ranks[group_rank] : group_rank;
}

int Group::group_rank_of(int global) const {
  if (!data_) return global >= 0 && global < torch::size() ? global : -1;
  auto it = std::find(data_->ranks.begin(), data_->ranks.end(), global);
  return it == data_->ranks.end() ? -1 : static_cast<int>(it - data_->ranks.begin());
}

std::vector<int> Group::ranks() const {
  if (data_) return data_->ranks;
  std::vector<int> all(static_cast<size_t>(torch::size()));
  for (int r = 0; r < torch::size(); ++r) all[r] = r;
  return all;
}

std::string Group::describe() const {
  return data_ ? fmt::format("{{{}}}", fmt::join(data_->ranks, ",")) : std::string("world");
}

void Group::require_member(const std::string& what) const {
  if (!is_member())
    throw InvalidArgument(
        fmt::format("{}: rank {} is not a member of group {}", what, torch::rank(), describe()));
}

}  // namespace lockstep::torch
