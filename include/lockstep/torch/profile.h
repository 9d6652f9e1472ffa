// Step profiling for `lockstep plan` (docs/plan.md).
//
// With LOCKSTEP_PROFILE=FILE (set by `lockstep profile` or `lockstep run
// --profile FILE`), rank 0's DistributedOptimizer records, after
// LOCKSTEP_PROFILE_WARMUP steps, LOCKSTEP_PROFILE_STEPS steps: forward,
// backward, synchronize and optimizer time, when each gradient became ready
// in backward, and the samples each step consumed; then it writes FILE (a
// lockstep.profile/1 JSON document, lockstep/profile/profile.h) once. Without
// the knob nothing is recorded and the hooks cost one pointer load each.
//
// Samples per step come from DistributedSampler::next_batch; a loop that
// draws its batches elsewhere reports them with profile_samples().
#pragma once

#include <cstdint>

namespace lockstep::torch {

// Adds n samples to the step being recorded (no-op when not profiling).
// Thread-safe.
void profile_samples(int64_t n);

// True while this process records a profile (rank 0 with LOCKSTEP_PROFILE).
bool profiling();

}  // namespace lockstep::torch
