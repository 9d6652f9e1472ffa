// Random bytes from the kernel, for secrets and connection nonces. Internal.
#pragma once

#include <cstddef>
#include <string>

namespace lockstep::rendezvous {

// n bytes from getrandom(); throws lockstep::Error when the kernel has none.
std::string random_bytes(size_t n);

}  // namespace lockstep::rendezvous
