// This machine's name, as every layer reports it (file names, checkpoints,
// profiles, liveness labels, TensorBoard event files). One place, so that a
// job's files and its logs agree on which host wrote them.
// Stateless and thread-safe: each call asks the kernel (and the knob) afresh.
#pragma once

#include <string>

namespace lockstep {

// gethostname(), or "localhost" when it fails or is empty.
std::string host_name();

// The host a rank says it is on: the LOCKSTEP_HOST knob when set (the
// launcher sets it so that ranks it placed on one host agree, and tests
// pretend several hosts on one machine with it), else host_name().
std::string host_label();

}  // namespace lockstep
