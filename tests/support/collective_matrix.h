// The collective matrix as plain functions over a Communicator, shared by the
// shm, MPI, Gloo and hierarchical test binaries (which create their
// communicators differently: forked workers, mpirun).
//
// Results are compared with typed_data.h's scalar reference: bitwise for
// integers, min/max and data movement; within a dtype-scaled tolerance for
// float sum/average/product, since MPI and Gloo may combine contributions in
// another order than rank order.
#pragma once

#include "lockstep/comm/communicator.h"

namespace lockstep::testing::matrix {

void allreduce_every_dtype_op_and_count(comm::Communicator& c);
void reduce_to_every_root(comm::Communicator& c);
void broadcast_from_every_root(comm::Communicator& c);
void allgather_and_allgatherv(comm::Communicator& c);
void gather_and_scatter_every_root(comm::Communicator& c);
void reduce_scatter_every_dtype_and_op(comm::Communicator& c);
void alltoall_and_alltoallv(comm::Communicator& c);
void send_recv_ring_and_barrier(comm::Communicator& c);

// Transports that reduce in rank order (shm) must match the reference
// bitwise; others (MPI, Gloo) within a dtype-scaled tolerance (the default).
void require_bitwise_reductions(bool on);

// Skips element counts above `max_count` (for algorithms whose chunking is
// another layer's, tested there).
void limit_counts(size_t max_count);

// Above 1000 elements, reduces each dtype with one op, rotating so that every
// op and every dtype still take the large path (9 large cases per reducing
// collective instead of 45), as sanitizer builds always do: for callers
// whose point is elsewhere than the ops (the matrix across network
// namespaces), the in-process tests running the whole matrix.
void thin_large_counts();

// Leaves `dtype` out of every case (NCCL has no int16).
void skip_dtype(comm::DataType dtype);

// Runs all of the above.
void run_all(comm::Communicator& c);

}  // namespace lockstep::testing::matrix
