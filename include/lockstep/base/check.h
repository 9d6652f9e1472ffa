// Protocol invariant checks, active in debug and sanitizer builds.
//
// LOCKSTEP_DCHECK(cond, "format", args...) and LOCKSTEP_DCHECK_EQ/_LE/_LT(a, b
// [, "format", args...]) state what the code relies on where a protocol can
// break (docs/errors.md, "Invariant checks": negotiation blobs, record frames,
// shm flag words, fusion and ZeRO offsets, elastic generations), in pairs:
// what is written is checked where it is written and again where it is read.
// A failed check is a bug in lockstep, not in the caller: it prints the file,
// line, the expression, both values and the message naming the invariant,
// then aborts so sanitizers and debuggers stop right there. In builds with
// NDEBUG (Release, RelWithDebInfo) the checks are dead code: compiled, so a
// message that no longer formats breaks every build, but never evaluated, so
// hot paths pay nothing. Debug builds (CI's sanitizer and fuzz
// trees) run them; LOCKSTEP_FORCE_DCHECK turns them on anyway.
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
#define LOCKSTEP_DCHECK(cond, ...)                                                                 \
  do {                                                                                             \
    if (!(cond)) [[unlikely]]                                                                      \
      ::lockstep::detail::dcheck_failed(__FILE__, __LINE__, #cond, ::fmt::format("" __VA_ARGS__)); \
  } while (false)
// LOCKSTEP_DCHECK_OP_(a, op, b[, "format", args...]): prints both values,
// then the message naming the invariant, if any.
#define LOCKSTEP_DCHECK_OP_(a, op, b, ...)                                \
  do {                                                                    \
    const auto& lockstep_dcheck_a = (a);                                  \
    const auto& lockstep_dcheck_b = (b);                                  \
    if (!(lockstep_dcheck_a op lockstep_dcheck_b)) [[unlikely]]           \
      ::lockstep::detail::dcheck_failed(                                  \
          __FILE__, __LINE__, #a " " #op " " #b,                          \
          ::fmt::format("{} vs {}", lockstep_dcheck_a, lockstep_dcheck_b) \
              __VA_OPT__(+": " + ::fmt::format(__VA_ARGS__)));            \
  } while (false)
#else
#define LOCKSTEP_DCHECK(cond, ...)         \
  do {                                     \
    if (false) {                           \
      (void)(cond);                        \
      (void)::fmt::format("" __VA_ARGS__); \
    }                                      \
  } while (false)
#define LOCKSTEP_DCHECK_OP_(a, op, b, ...)          \
  do {                                              \
    if (false) {                                    \
      (void)((a)op(b));                             \
      __VA_OPT__((void)::fmt::format(__VA_ARGS__);) \
    }                                               \
  } while (false)
#endif
#define LOCKSTEP_DCHECK_EQ(a, b, ...) LOCKSTEP_DCHECK_OP_(a, ==, b __VA_OPT__(, ) __VA_ARGS__)
#define LOCKSTEP_DCHECK_LE(a, b, ...) LOCKSTEP_DCHECK_OP_(a, <=, b __VA_OPT__(, ) __VA_ARGS__)
#define LOCKSTEP_DCHECK_LT(a, b, ...) LOCKSTEP_DCHECK_OP_(a, <, b __VA_OPT__(, ) __VA_ARGS__)
