// Internal to lockstep::base: the rank the log prefix shows (set_log_rank),
// read by the terminate handler. Not in log.h so that adding it did not
// touch a header nearly every source includes.
#pragma once

namespace lockstep {

int current_log_rank();  // -1 until set_log_rank()

}  // namespace lockstep
