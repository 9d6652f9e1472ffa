// Backend::gatherv by default: an allgatherv whose result only the root
// keeps (size() times the traffic a gather needs).
#include <vector>

#include "comm/collectives/scratch.h"
#include "lockstep/comm/backend.h"

namespace lockstep::comm {

void Backend::gatherv(const void* send, void* recv, std::span<const size_t> counts, DataType dtype,
                      int root) {
  if (rank() == root) return allgatherv(send, recv, counts, dtype);
  std::vector<std::byte> discard(derived::total(counts) * dtype_size(dtype));
  allgatherv(send, discard.data(), counts, dtype);
}

}  // namespace lockstep::comm
