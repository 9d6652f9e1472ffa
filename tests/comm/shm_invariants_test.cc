// The shm transport's flag words (step counters, channel sent/acked counts)
// have one writer and advance by one per publication; publish() asserts it
// (Note [Shared-memory protocol]). Death tests: they run where
// LOCKSTEP_DCHECKs are compiled in (Debug, CI's sanitizer trees) and skip in
// NDEBUG builds.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "comm/transport/shm/sync.h"
#include "support/dcheck_death.h"

namespace lockstep::comm::shm {
namespace {

class ShmFlagWordDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { LOCKSTEP_DEATH_TEST_NEEDS_DCHECKS(); }
};

TEST(ShmFlagWord, StepsOfOneAreAcceptedAcrossTheWrap) {
  WaitWord word;
  publish(word, 1);
  publish(word, 2);
  word.value = std::numeric_limits<uint32_t>::max();
  publish(word, 0);  // counters wrap; Waiter::wait compares them wrap-aware
  EXPECT_EQ(word.value.load(), 0u);
}

TEST_F(ShmFlagWordDeathTest, APublicationThatSkipsAStepAborts) {
  WaitWord word;
  publish(word, 1);
  publish(word, 2);
  EXPECT_DEATH(publish(word, 4), "shm flag word: publishing 4 over 2");
}

TEST_F(ShmFlagWordDeathTest, ASecondWriterRepublishingAborts) {
  WaitWord word;
  publish(word, 1);
  EXPECT_DEATH(publish(word, 1), "publishing 1 over 1; a flag has one writer");
}

}  // namespace
}  // namespace lockstep::comm::shm
