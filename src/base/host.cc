
#include <unistd.h>

#include "lockstep/base/knobs.h"

#include "lockstep/base/host.h"

namespace lockstep {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

std::string host_label() {
  std::string host = knob_string("LOCKSTEP_HOST");
  return host.empty() ? host_name() : host;
}

}  // namespace lockstep
