#include "lockstep/policy/hierarchical.h"

#include <fmt/format.h>

#include "lockstep/base/error.h"

namespace lockstep::policy {

HierarchicalMode parse_hierarchical(std::string_view text) {
  if (text == "auto") return HierarchicalMode::kAuto;
  if (text == "1" || text == "on" || text == "true") return HierarchicalMode::kOn;
  if (text == "0" || text == "off" || text == "false") return HierarchicalMode::kOff;
  throw InvalidArgument(fmt::format("LOCKSTEP_HIERARCHICAL='{}': use auto, 0 or 1", text));
}

bool hierarchical_taken(HierarchicalMode mode, int hosts, int local_ranks) {
  switch (mode) {
    case HierarchicalMode::kAuto: return hosts > 1 && local_ranks > 1;
    case HierarchicalMode::kOn: return hosts > 1 || local_ranks > 1;
    case HierarchicalMode::kOff: return false;
  }
  return false;
}

}  // namespace lockstep::policy
