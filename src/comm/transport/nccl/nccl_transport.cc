// The nccl entry of Note [Transport registry].
#include "comm/transport/nccl/nccl_backend.h"
#include "comm/transport/transport.h"

namespace lockstep::comm {
namespace {

// Never chosen by LOCKSTEP_BACKEND=auto: its buffers are device memory, so
// only a caller that holds CUDA buffers (the engine with CUDA tensors) or
// names it explicitly may use it.
int nccl_priority(const WorldInfo&) { return -1; }

}  // namespace

extern const Transport transport_nccl;
const Transport transport_nccl{
    .name = "nccl",
    .summary =
        "NCCL on CUDA buffers, one GPU per rank, any number of hosts (bootstrap through "
        "the host transport)",
    .auto_priority = nccl_priority,
    .make = nccl::make_backend,
    .make_subset = nccl::make_subset,
};

}  // namespace lockstep::comm
