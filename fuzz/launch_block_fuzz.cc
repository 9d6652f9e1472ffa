// The launch block a remote host's `lockstep remote-worker` reads from its
// stdin: any bytes must either decode or raise lockstep::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "launcher/remote.h"
#include "lockstep/base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    lockstep::launcher::launch_block_size(bytes);
    auto block = lockstep::launcher::decode_launch_block(bytes);
    // What decodes must re-encode to a block that decodes the same.
    auto again =
        lockstep::launcher::decode_launch_block(lockstep::launcher::encode_launch_block(block));
    if (again.argv != block.argv || again.env != block.env || again.host != block.host)
      __builtin_trap();
  } catch (const lockstep::Error&) {
  }
  return 0;
}
