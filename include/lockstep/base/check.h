// Protocol invariant checks, active in debug and sanitizer builds.
//
// LOCKSTEP_DCHECK(cond, "format", args...) and LOCKSTEP_DCHECK_EQ(a, b) state
// what the code relies on (the shm step parity, negotiator slot counts,
// fusion offsets). A failed check is a bug in lockstep, not in the caller:
// it prints the file, line, the expression and both values, then aborts so
// sanitizers and debuggers stop right there. In builds with NDEBUG (Release,
// RelWithDebInfo) the checks compile to nothing and their arguments are not
// evaluated; LOCKSTEP_FORCE_DCHECK turns them on anyway.
//
// Arguments are validated with exceptions (InvalidArgument), never with these.
#pragma once

#include <fmt/format.h>

#if !defined(NDEBUG) || defined(LOCKSTEP_FORCE_DCHECK)
#define LOCKSTEP_DCHECK_IS_ON 1
#else
#define LOCKSTEP_DCHECK_IS_ON 0
#endif

namespace lockstep::detail {
[[noreturn]] void dcheck_failed(const char* file, int line, const char* expr,
                                const std::string& detail);
}  // namespace lockstep::detail

#if LOCKSTEP_DCHECK_IS_ON
#define LOCKSTEP_DCHECK(cond, ...)                                                        \
  do {                                                                                    \
    if (!(cond)) [[unlikely]]                                                             \
      ::lockstep::detail::dcheck_failed(__FILE__, __LINE__, #cond,                        \
                                        ::fmt::format("" __VA_ARGS__));                   \
  } while (false)
#define LOCKSTEP_DCHECK_EQ(a, b)                                                          \
  do {                                                                                    \
    const auto& lockstep_dcheck_a = (a);                                                  \
    const auto& lockstep_dcheck_b = (b);                                                  \
    if (!(lockstep_dcheck_a == lockstep_dcheck_b)) [[unlikely]]                           \
      ::lockstep::detail::dcheck_failed(                                                  \
          __FILE__, __LINE__, #a " == " #b,                                               \
          ::fmt::format("{} vs {}", lockstep_dcheck_a, lockstep_dcheck_b));               \
  } while (false)
#else
#define LOCKSTEP_DCHECK(cond, ...) \
  do {                             \
    if (false) (void)(cond);       \
  } while (false)
#define LOCKSTEP_DCHECK_EQ(a, b)        \
  do {                                  \
    if (false) (void)((a) == (b));      \
  } while (false)
#endif
