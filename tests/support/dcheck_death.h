// Death tests of LOCKSTEP_DCHECKs (lockstep/base/check.h): they run where the
// checks are compiled in (Debug builds: CI's sanitizer trees) and skip in
// NDEBUG builds, where the checks are dead code. The threadsafe style
// re-executes the test binary for each death, which the TSan tree needs.
#pragma once

#include <gtest/gtest.h>

#include "lockstep/base/check.h"

// In a test body or a fixture's SetUp().
#define LOCKSTEP_DEATH_TEST_NEEDS_DCHECKS()                               \
  do {                                                                    \
    if (!LOCKSTEP_DCHECK_IS_ON)                                           \
      GTEST_SKIP() << "LOCKSTEP_DCHECKs are compiled out (NDEBUG build)"; \
    GTEST_FLAG_SET(death_test_style, "threadsafe");                       \
  } while (false)
