// Backend::scatter by default: the root broadcasts every block and each rank
// keeps its own (size() times the traffic a scatter needs).
#include <vector>

#include "comm/collectives/scratch.h"
#include "lockstep/comm/backend.h"

namespace lockstep::comm {

void Backend::scatter(const void* send, void* recv, size_t count, DataType dtype, int root) {
  size_t block = count * dtype_size(dtype);
  std::vector<std::byte> all(block * static_cast<size_t>(size()));
  if (rank() == root) derived::copy(all.data(), send, all.size());
  broadcast(all.data(), count * static_cast<size_t>(size()), dtype, root);
  derived::copy(recv, all.data() + static_cast<size_t>(rank()) * block, block);
}

}  // namespace lockstep::comm
