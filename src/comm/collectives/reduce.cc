// Backend::reduce by default: every rank computes the allreduce, only the
// root keeps it (same traffic as a reduce followed by a broadcast).
#include <vector>

#include "comm/collectives/scratch.h"
#include "lockstep/comm/backend.h"

namespace lockstep::comm {

void Backend::reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                     int root) {
  if (rank() == root) return allreduce(send, recv, count, dtype, op);
  std::vector<std::byte> discard(count * dtype_size(dtype));
  allreduce(send, discard.data(), count, dtype, op);
}

}  // namespace lockstep::comm
