// "Did you mean ...?" for misspelt knobs (issue 39 item 7).
#include "lockstep/base/knob_suggest.h"

#include <gtest/gtest.h>

#include <string>

#include "lockstep/base/error.h"
#include "lockstep/base/knobs.h"

namespace lockstep {
namespace {

TEST(KnobSuggest, EditDistanceCountsInsertionsDeletionsSubstitutionsAndSwaps) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);  // the textbook pair
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", "abc"), 0u);
  EXPECT_EQ(edit_distance("abcd", "abdc"), 1u);  // one swap, not two substitutions
  EXPECT_EQ(edit_distance("lockstep_x", "LOCKSTEP_X"), 0u);
}

TEST(KnobSuggest, TheIssuesTypoNamesFusionThreshold) {
  EXPECT_EQ(closest_knob("LOCKSTEP_FUSION_TRESHOLD"), "LOCKSTEP_FUSION_THRESHOLD");
  EXPECT_EQ(did_you_mean("LOCKSTEP_FUSION_TRESHOLD"), " (did you mean LOCKSTEP_FUSION_THRESHOLD?)");
  try {
    knob("LOCKSTEP_FUSION_TRESHOLD");
    FAIL() << "an undeclared knob was read";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean LOCKSTEP_FUSION_THRESHOLD?"),
              std::string::npos)
        << e.what();
  }
}

TEST(KnobSuggest, DeclaredAndFarNamesGetNoSuggestion) {
  EXPECT_EQ(closest_knob("LOCKSTEP_FUSION_THRESHOLD"), "");
  EXPECT_EQ(closest_knob("LOCKSTEP_X"), "");
  EXPECT_EQ(closest_knob("LOCKSTEP_COMPLETELY_UNRELATED_NAME"), "");
  EXPECT_EQ(did_you_mean("LOCKSTEP_ZZZZZZZZZZZZ"), "");
}

// Every declared knob with one character dropped from its own part is one
// edit from it, so the suggestion is a knob one edit away (it or a sibling).
TEST(KnobSuggest, EveryKnobWithOneLetterDroppedGetsAKnobOneEditAway) {
  for (const Knob& k : all_knobs()) {
    std::string typo(k.name);
    if (typo.size() < 9 + 6) continue;  // too short a name for a confident guess
    typo.erase(typo.size() - 3, 1);
    const std::string_view guess = closest_knob(typo);
    ASSERT_FALSE(guess.empty()) << typo;
    EXPECT_EQ(edit_distance(typo, guess), 1u) << typo << " -> " << guess;
  }
}

}  // namespace
}  // namespace lockstep
