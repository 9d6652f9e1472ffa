#!/usr/bin/env bash
# clang's thread-safety analysis sees lockstep's lock annotations
# (include/lockstep/base/mutex.h): correct uses compile clean under
# -Werror=thread-safety, and each misuse below is refused naming the member.
# Skipped (77) without clang++.
#
#   thread_safety_test.sh INCLUDE_DIR
set -uo pipefail
inc=${1:?usage: thread_safety_test.sh INCLUDE_DIR}
command -v clang++ >/dev/null || { echo "SKIPPED: clang++ is not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

compile() {  # compile NAME BODY: writes a class with a guarded member and BODY, compiles it
  cat >"$tmp/$1.cc" <<EOS
#include <condition_variable>
#include "lockstep/base/mutex.h"
struct Box {
  lockstep::Mutex mu;
  std::condition_variable cv;
  int count LOCKSTEP_GUARDED_BY(mu) = 0;
  void bump() LOCKSTEP_REQUIRES(mu) { ++count; }
  $2
};
int main() { Box b; b.run(); }
EOS
  clang++ -std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety -I"$inc" "$tmp/$1.cc" \
    >"$tmp/$1.log" 2>&1
}
accepts() {  # accepts NAME BODY
  if compile "$1" "$2"; then echo "ok: $1 compiles"
  else echo "FAILED: $1 was refused:"; cat "$tmp/$1.log"; failures=$((failures + 1)); fi
}
refuses() {  # refuses NAME BODY
  if ! compile "$1" "$2" && grep -q "requires holding mutex 'mu'" "$tmp/$1.log"; then
    echo "ok: $1 refused"
  else echo "FAILED: $1 was not refused for the lock:"; cat "$tmp/$1.log"; failures=$((failures + 1)); fi
}

accepts locked-access 'void run() { lockstep::MutexLock l(mu); ++count; bump(); }'
accepts wait-loop 'void run() { lockstep::MutexLock l(mu); while (count == 0) l.wait(cv); }'
accepts relock 'void run() { lockstep::MutexLock l(mu); l.unlock(); l.lock(); ++count; }'
refuses unlocked-write 'void run() { ++count; }'
refuses unlocked-read 'int run() { return count; }'
refuses requires-unheld 'void run() { bump(); }'
refuses after-unlock 'void run() { lockstep::MutexLock l(mu); l.unlock(); ++count; }'

if ((failures)); then echo "$failures check(s) failed"; exit 1; fi
echo "all thread-safety checks passed"
