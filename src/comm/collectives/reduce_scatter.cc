// Backend::reduce_scatter by default: allreduce the whole input, keep this
// rank's block (size() times the traffic of a true reduce-scatter).
#include <vector>

#include "comm/collectives/scratch.h"
#include "lockstep/comm/backend.h"

namespace lockstep::comm {

void Backend::reduce_scatter(const void* send, void* recv, size_t count, DataType dtype,
                             ReduceOp op) {
  size_t block = count * dtype_size(dtype);
  std::vector<std::byte> full(block * static_cast<size_t>(size()));
  allreduce(send, full.data(), count * static_cast<size_t>(size()), dtype, op);
  derived::copy(recv, full.data() + static_cast<size_t>(rank()) * block, block);
}

}  // namespace lockstep::comm
