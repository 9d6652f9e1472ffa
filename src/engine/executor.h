// Executor: runs one planned Batch on a process set's Communicator, filling
// this rank's outputs. A rank without an entry for an item (it has joined)
// still takes part, contributing neutral values / zero rows into scratch.
//
// Thread-safety: none; used by one ProcessSetWorker's thread.
#pragma once

#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/fusion.h"
#include "engine/negotiator.h"
#include "engine/op_state.h"
#include "engine/timeline.h"
#include "lockstep/plan/shm_algorithm.h"

namespace lockstep::engine::detail {

class Executor {
 public:
  Executor(comm::Communicator& comm, Timeline* timeline);

  // entries[i]: this rank's entry for cycle.ready[i], or null. A failure
  // local to one entry (its allocator threw) lands in errors[i]; errors of
  // the collective itself propagate. Returns the bytes moved.
  size_t run(const Batch& batch, const CycleResult& cycle, std::span<Entry* const> entries,
             std::span<std::exception_ptr> errors);

 private:
  struct Times {
    Clock::time_point start, copied_in, reduced, copied_out;
  };
  size_t allreduce(const Batch& batch, const CycleResult& cycle, std::span<Entry* const> entries,
                   Times& t);
  size_t allgather(const ReadyItem& item, const CycleResult& cycle, Entry* entry,
                   std::exception_ptr& error);
  size_t broadcast(const ReadyItem& item, Entry* entry);
  size_t alltoall(const ReadyItem& item, Entry* entry, std::exception_ptr& error);
  size_t reduce_scatter(const ReadyItem& item, Entry* entry, std::exception_ptr& error);
  // The caller's allocation, or scratch (and `error` set) when it throws.
  void* allocate(Entry* entry, const Shape& shape, DataType dtype, std::exception_ptr& error);
  void* scratch(size_t bytes);
  void record(const Batch& batch, std::span<Entry* const> entries, const Times& t);
  // The shm algorithm an allreduce batch ran (plan::shm_allreduce_choice,
  // the transport's own decision), or "" on other transports.
  std::string algorithm_of(const Batch& batch, const Request& request) const;

  comm::Communicator& comm_;
  Timeline* timeline_;
  std::optional<plan::ShmPolicy> shm_policy_;  // set when the transport is shm
  std::vector<std::byte> fusion_;
  std::vector<std::byte> scratch_;
};

}  // namespace lockstep::engine::detail
