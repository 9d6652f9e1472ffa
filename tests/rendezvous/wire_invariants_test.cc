// The store's frames: frame() asserts it never writes a body the reader
// would refuse as hostile (process_input's limit). A death test: it runs
// where LOCKSTEP_DCHECKs are compiled in (Debug, CI's sanitizer trees) and
// skips in NDEBUG builds.
#include <gtest/gtest.h>

#include <string>

#include "rendezvous/wire.h"
#include "support/dcheck_death.h"

namespace lockstep::rendezvous::wire {
namespace {

TEST(RendezvousFrameDeathTest, ABodyOverTheReadersLimitIsNeverWritten) {
  LOCKSTEP_DEATH_TEST_NEEDS_DCHECKS();
  const std::string secret(32, 's'), nonce(kNonceBytes, 'n');
  EXPECT_EQ(frame(secret, nonce, Direction::kToServer, 0, "get").size(),
            kLengthBytes + 3 + kMacBytes);
  EXPECT_DEATH(frame(secret, nonce, Direction::kToServer, 0, std::string(kMaxBodyBytes + 1, 'x')),
               "rendezvous frame: body over the wire limit");
}

}  // namespace
}  // namespace lockstep::rendezvous::wire
