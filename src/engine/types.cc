#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/collective_traits.h"
#include "lockstep/base/knobs.h"
#include "lockstep/engine/engine.h"

namespace lockstep::engine {

std::string_view collective_name(Collective c) {
  // Error messages name what they were given, also a value past the enum.
  if (static_cast<int>(c) > static_cast<int>(Collective::kAddProcessSet)) return "collective";
  return detail::traits(c).name;
}

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string format_shape(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

EngineConfig EngineConfig::from_knobs() {
  EngineConfig c;
  c.fusion_threshold = knob_bytes("LOCKSTEP_FUSION_THRESHOLD");
  c.deterministic = knob_bool("LOCKSTEP_DETERMINISTIC");
  c.stall_warning_s = knob_double("LOCKSTEP_STALL_WARNING");
  c.stall_timeout_s = knob_double("LOCKSTEP_STALL_TIMEOUT");
  c.deadlock_timeout_s = knob_double("LOCKSTEP_DEADLOCK_TIMEOUT");
  c.timeline_path = knob_string("LOCKSTEP_TIMELINE");
  c.autotune = knob_bool("LOCKSTEP_AUTOTUNE");
  c.autotune_samples = static_cast<size_t>(knob_int("LOCKSTEP_AUTOTUNE_SAMPLES"));
  c.cache_capacity = static_cast<size_t>(knob_int("LOCKSTEP_CACHE_CAPACITY"));
  c.flight_recorder = static_cast<size_t>(knob_int("LOCKSTEP_FLIGHT_RECORDER"));
  c.flight_dir = knob_string("LOCKSTEP_FLIGHT_DIR");
  return c;
}

}  // namespace lockstep::engine
