// NCCL transport: lockstep collectives on CUDA buffers (libnccl), for jobs
// with one GPU per rank.
//
// Buffers: device pointers on the GPU that was current in the thread that
// created the backend (the placement's cudaSetDevice(local_rank % devices)
// runs first); every entry, from any thread (the engine's), makes that GPU
// current and restores the caller's. A host pointer, or one on another GPU,
// fails with InvalidArgument before anything is enqueued.
//
// Stream semantics: every collective and every DeviceMemory operation is
// enqueued on one stream the backend owns (cudaStreamNonBlocking, so it does
// not serialise with the legacy default stream). By default each collective
// then waits for its own completion, so a host caller may read the result
// on return (the Backend contract). In deferred mode
// (DeviceMemory::set_deferred(true)) collectives return once enqueued; the
// caller orders its consumers after them (DeviceMemory::record_event) or
// calls DeviceMemory::synchronize(), where errors of the enqueued work
// surface. barrier() always waits.
//
// Bootstrap: rank 0's ncclUniqueId reaches the others through a short-lived
// host communicator over the same world (LOCKSTEP_BACKEND's auto choice:
// shm on one host, gloo or mpi across hosts), which also exchanges the
// ranks' host names, pids (for liveness checks) and GPU bus ids. A subset
// (split) gets its id from its first member over the parent communicator.
//
// Failures, never a hang: the communicator is non-blocking
// (ncclConfig_t::blocking = 0; LOCKSTEP_NCCL_BLOCKING=1 gives NCCL's
// blocking mode, whose calls may block while NCCL connects to a peer), so
// no NCCL call blocks the host; every wait
// polls the stream's completion event, ncclCommGetAsyncError and the pids of
// the peers on this host, and ends
//   - when a local peer died: PeerFailure naming it (within ~10 ms);
//   - on an NCCL or CUDA error: PeerFailure(-1) for NCCL's remote errors
//     (a peer on another host failed), else lockstep::Error, with NCCL's
//     text;
//   - at LOCKSTEP_TIMEOUT: TimeoutError naming the operation and how long it
//     waited (NCCL cannot say which peer it waits for).
// Each calls ncclCommAbort first, so the GPU work is cancelled; the
// communicator is then unusable (Aborted). Not detected: ranks calling
// different collectives or counts (NCCL has no descriptors; under
// LOCKSTEP_VERIFY_OPS=1 each collective first allgathers its descriptor
// and a disagreement raises MismatchError on every rank) and send/recv tags
// (not carried by NCCL; matched by order only).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/world.h"

namespace lockstep::comm::nccl {

// Connects the ranks of `world` under `tag`. Collective over all of them.
// Throws InvalidArgument when no GPU is visible, naming CUDA's reason.
std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& tag);
// Transport::make_subset: the communicator over `ranks` of `parent`, its
// ncclUniqueId sent over the parent among the members only.
std::unique_ptr<Backend> make_subset(Backend& parent, std::span<const int> ranks,
                                     const WorldInfo& sub, const std::string& tag);

}  // namespace lockstep::comm::nccl
