// The planner's names for the step-profile format, which lives in its own
// layer (lockstep/profile/profile.h) so that the torch layer that records it
// needs no planner. plan::Profile and the functions below are the same
// entities as profile::Profile and its functions.
#pragma once

#include "lockstep/profile/profile.h"

namespace lockstep::plan {

using profile::dtype_bytes;
using profile::GradientTiming;
using profile::kProfileSchema;
using profile::load_profile;
using profile::parse_profile;
using profile::Profile;
using profile::profile_to_json;
using profile::ProfileSummary;
using profile::save_profile;
using profile::StepTiming;
using profile::summarize;

}  // namespace lockstep::plan
