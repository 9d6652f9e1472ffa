// Building and checking entries on the submitting thread, before anything is
// queued: a bad call fails on the calling rank alone, with InvalidArgument
// naming the operation, the tensor and the argument.
#pragma once

#include <string>
#include <vector>

#include "engine/op_state.h"

namespace lockstep::engine::detail {

Entry make_entry(Collective collective, std::string name, const void* input, void* output,
                 Shape shape, DataType dtype);

// A grouped allgather's or reduce-scatter's members (`what` names the call
// in errors), one entry each with its allocator; InvalidArgument when the
// lists differ in length or are empty.
std::vector<Entry> allocating_group(Collective collective, const char* what,
                                    const std::vector<std::string>& names,
                                    const std::vector<const void*>& inputs,
                                    const std::vector<Shape>& shapes,
                                    const std::vector<DataType>& dtypes,
                                    std::vector<Allocator>& allocates);

// Checks `entry` against a process set of `set_size` ranks; fills defaults
// (alltoall's even splits).
void validate(Entry& entry, int set_size);

// Sorted, distinct, in [0, world_size); throws InvalidArgument otherwise.
std::vector<int> checked_set_ranks(std::vector<int> ranks, int world_size);

}  // namespace lockstep::engine::detail
