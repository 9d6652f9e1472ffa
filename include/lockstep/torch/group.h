// Group: a subset of the job's ranks that communicates on its own, as
// torch.distributed's process groups. Built on the engine's process sets;
// collectives take its id() as their process_set, and DistributedOptimizer,
// SyncBatchNorm and the lockstep::parallel classes take the Group itself.
//
// Ranks inside a group are numbered 0..size()-1 in ascending global-rank
// order (rank() is this process's index; -1 when it is not a member).
//
// A Group is a small immutable value (copies share the data); thread-safe.
// Creating one is collective over the whole job: every rank, member or not,
// calls create() with the same ranks, in the same order as the other ranks'
// create() calls (the engine numbers sets in agreement).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace lockstep::torch {

class Group {
 public:
  // The world: every rank. Valid before init() (then a group of one) and
  // always current, so a default-constructed option means "all ranks".
  Group() = default;

  // Collective over all ranks. `ranks`: global ranks, distinct, in range (any
  // order; kept ascending). The whole world gives the world group; any other
  // list (one rank included) gets its own engine process set.
  static Group create(std::vector<int> ranks);

  bool is_world() const { return data_ == nullptr; }
  // The engine process set (0 for the world).
  int id() const;
  int size() const;
  // This process's rank in the group; -1 when not a member.
  int rank() const;
  bool is_member() const { return rank() >= 0; }
  // Global rank of group rank `group_rank`; throws InvalidArgument when out of range.
  int global_rank(int group_rank) const;
  // Group rank of a global rank, -1 when it is not a member.
  int group_rank_of(int global_rank) const;
  // Ascending global ranks.
  std::vector<int> ranks() const;
  // "{0,2}" or "world", for messages.
  std::string describe() const;

  // Throws InvalidArgument naming `what` when this process is not a member.
  void require_member(const std::string& what) const;

 private:
  struct Data;
  explicit Group(std::shared_ptr<const Data> data) : data_(std::move(data)) {}
  std::shared_ptr<const Data> data_;
};

}  // namespace lockstep::torch
