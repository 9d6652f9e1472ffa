// Mismatched collectives across ranks, shared by the shm, MPI and Gloo test
// binaries: every ordered pair of different collective kinds must fail on
// every rank with MismatchError naming both, and leave the communicator
// giving right answers afterwards (issue 15.1: on shm, a barrier against an
// allreduce left the next allreduce summing one rank's value).
//
// MPI and Gloo detect a mismatch before posting only with
// LOCKSTEP_VERIFY_OPS=1; set it before creating the communicator.
#pragma once

#include <string>

#include "lockstep/comm/communicator.h"

namespace lockstep::testing::matrix {

// Rank 0 calls kind A and every other rank kind B, for every A != B; after
// each, checks that allreduce (one small, one of several shm chunks),
// broadcast and allgather return the reference. Needs size() >= 2.
void every_kind_pair_mismatch_then_right_results(comm::Communicator& c);

// allreduce, broadcast and allgather give the reference results; `context`
// names what came before, for failure messages.
void expect_right_results(comm::Communicator& c, const std::string& context);

}  // namespace lockstep::testing::matrix
