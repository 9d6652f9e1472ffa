#!/usr/bin/env bash
# Runs a command with the background work of a shared development machine
# paused: every build process of this user with nice >= 10 (compilers,
# assemblers, linkers, ninja, make, cmake, ctest started with `nice`) is
# stopped (SIGSTOP) for the
# command and continued (SIGCONT) afterwards, also when the command fails or
# is interrupted. Lists what it stopped on stderr. For timing on a machine
# shared with builds; never needed on a dedicated host.
#   scripts/frozen.sh COMMAND [ARGS...]
set -uo pipefail
(($#)) || { echo "usage: scripts/frozen.sh COMMAND [ARGS...]" >&2; exit 2; }
builds='^(cc1|cc1plus|cc|c\+\+|g\+\+|gcc|clang|clang\+\+|as|ld|collect2|ninja|make|cmake|ctest|ccache)$'
mapfile -t pids < <(ps -u "$(id -u)" -o pid=,ni=,comm= |
  awk -v self=$$ -v re="$builds" '$2 >= 10 && $1 != self && $3 ~ re {print $1}')
resume() { ((${#pids[@]})) && kill -CONT "${pids[@]}" 2>/dev/null; }
trap resume EXIT INT TERM
if ((${#pids[@]})); then
  echo "frozen.sh: stopping ${#pids[@]} niced process(es): ${pids[*]}" >&2
  kill -STOP "${pids[@]}" 2>/dev/null
fi
"$@"
