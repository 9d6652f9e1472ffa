// The knob table: the only place a default, an accepted value or the
// launcher's ownership is stated, and docs/knobs.md in step with it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"
#include "lockstep/base/log.h"

namespace lockstep {
namespace {

TEST(Knobs, DefaultReadIgnoresTheEnvironment) {
  setenv("LOCKSTEP_TIMEOUT", "12", 1);
  EXPECT_EQ(knob_double("LOCKSTEP_TIMEOUT"), 12);
  EXPECT_EQ(knob_double("LOCKSTEP_TIMEOUT", KnobRead::kDefault), 300);
  EXPECT_TRUE(knob_is_set("LOCKSTEP_TIMEOUT"));
  unsetenv("LOCKSTEP_TIMEOUT");
  EXPECT_FALSE(knob_is_set("LOCKSTEP_TIMEOUT"));
  EXPECT_THROW(knob_is_set("LOCKSTEP_NO_SUCH_KNOB"), InvalidArgument);
  EXPECT_EQ(knob_bytes("LOCKSTEP_SHM_SLOT_BYTES", KnobRead::kDefault), 1u << 20);
}

TEST(Knobs, ChoicesAreCheckedAndNamed) {
  setenv("LOCKSTEP_LOG_LEVEL", "verbose", 1);
  try {
    knob_choice("LOCKSTEP_LOG_LEVEL");
    ADD_FAILURE() << "a value outside the choices was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("error|warning|info|debug"), std::string::npos)
        << e.what();
  }
  setenv("LOCKSTEP_LOG_LEVEL", "debug", 1);
  EXPECT_EQ(knob_choice("LOCKSTEP_LOG_LEVEL"), "debug");
  unsetenv("LOCKSTEP_LOG_LEVEL");
  EXPECT_EQ(knob_choices(knob("LOCKSTEP_OVERLAP")),
            (std::vector<std::string>{"auto", "on", "off"}));
  EXPECT_TRUE(knob_choices(knob("LOCKSTEP_TIMEOUT")).empty());
}

// log.cc once turned a mistyped LOCKSTEP_LOG_LEVEL silently into "warning".
// The threshold is read once per process, so the check runs in a child.
TEST(Knobs, MistypedLogLevelIsReportedNotSilentlyWarning) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("LOCKSTEP_LOG_LEVEL", "verbose", 1);
        bool info = log_enabled(LogLevel::kInfo);
        std::exit(info ? 3 : 0);
      },
      testing::ExitedWithCode(0), "LOCKSTEP_LOG_LEVEL='verbose' is not one of error\\|warning");
}

TEST(Knobs, EveryChoiceListHoldsItsDefaultAndEveryKnobHasHelp) {
  for (const Knob& k : all_knobs()) {
    std::vector<std::string> choices = knob_choices(k);
    if (!choices.empty()) {
      EXPECT_NE(std::find(choices.begin(), choices.end(), k.default_value), choices.end())
          << k.name;
    }
    EXPECT_FALSE(k.help.empty()) << k.name;
  }
  EXPECT_EQ(knob("LOCKSTEP_RANK").owner, kLauncher);
  EXPECT_EQ(knob("LOCKSTEP_TIMEOUT").owner, kUser);
}

// docs/knobs.md has one row per knob: | `NAME` | `default` | ... |
TEST(Knobs, DocsListEveryKnobWithItsDefault) {
  std::ifstream in(LOCKSTEP_KNOBS_DOC);
  ASSERT_TRUE(in) << LOCKSTEP_KNOBS_DOC;
  std::stringstream doc;
  doc << in.rdbuf();
  for (const Knob& k : all_knobs())
    EXPECT_NE(doc.str().find(fmt::format("| `{}` | `{}` |", k.name, k.default_value)),
              std::string::npos)
        << k.name << " (default '" << k.default_value << "') has no row in docs/knobs.md";
}

}  // namespace
}  // namespace lockstep
