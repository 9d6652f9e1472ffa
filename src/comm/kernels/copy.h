// Bulk copies for the shared-memory transport.
#pragma once

#include <cstddef>

namespace lockstep::comm::kernels {

// memcpy whose stores bypass the cache (non-temporal) where the CPU has
// AVX2. Worth it only when the destination will not be read soon and the
// whole message is larger than the last-level cache: it saves the read for
// ownership that a normal store pays on every destination line.
void copy_streaming(void* dst, const void* src, size_t bytes);

}  // namespace lockstep::comm::kernels
