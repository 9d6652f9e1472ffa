#include "lockstep/base/check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace lockstep::detail {

void dcheck_failed(const char* file, int line, const char* expr, const std::string& detail) {
  std::string msg = fmt::format("lockstep: invariant violated at {}:{}: {}{}{}\n", file, line, expr,
                                detail.empty() ? "" : ": ", detail);
  std::fwrite(msg.data(), 1, msg.size(), stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace lockstep::detail
