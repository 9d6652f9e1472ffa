// Shared-memory transport: the embedded default for ranks on one host.
//
// Note [Shared-memory protocol]
// Every rank owns a step counter. A collective is a sequence of steps; at each
// step a rank may fill its staging slot, then publishes the step number, then
// waits until every peer has published it, then reads peers' slots. Each fill
// alternates between two buffers per rank, and a rank refills a buffer only
// after a later step every peer reached once done reading it, so no extra
// handshake is needed. The first step of every collective also carries an
// OpDesc; ranks compare them and fail with MismatchError together.
// Reductions always combine contributions in rank order (kernels/reduce.h),
// so every rank gets bitwise identical results whatever the chunking.
// docs/shm.md has the algorithms and their cost model.
#pragma once

#include <memory>
#include <string>

#include "lockstep/comm/backend.h"
#include "lockstep/comm/world.h"

namespace lockstep::comm::shm {

// Connects the ranks of `world` (all on this host) through the segment
// /dev/shm/lockstep-<job_id>-<tag>. Blocks until every rank has attached.
std::unique_ptr<Backend> make_backend(const WorldInfo& world, const std::string& tag);

}  // namespace lockstep::comm::shm
