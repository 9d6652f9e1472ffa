#!/usr/bin/env bash
# Runs a command with the background work of a shared development machine
# paused: every process of this user with nice >= 10 (builds, and tests
# started with `nice`: compilers, linkers, ninja, ctest and the test
# binaries it runs) is stopped (SIGSTOP) for the command and continued
# (SIGCONT) afterwards, also when the command fails or is interrupted. Work
# niced while the command runs is stopped too (checked twice a second), so a
# measurement of many minutes stays clean, not only its first one. Lists what
# it stopped on stderr. For timing on a machine shared with builds; never needed on a
# dedicated host.
#   scripts/frozen.sh COMMAND [ARGS...]
set -uo pipefail
(($#)) || { echo "usage: scripts/frozen.sh COMMAND [ARGS...]" >&2; exit 2; }
stopped=$(mktemp)
niced_processes() {
  # ppid 2: kernel threads, which signals do not stop
  ps -u "$(id -u)" -o pid=,ppid=,ni= |
    awk -v self=$$ '$3 >= 10 && $1 != self && $2 != 2 && $1 != 2 {print $1}'
}
stop_new() {  # stops the niced processes not stopped yet and remembers them
  local fresh
  mapfile -t fresh < <(niced_processes | grep -vxF -f "$stopped")
  ((${#fresh[@]})) || return 0
  echo "frozen.sh: stopping ${#fresh[@]} niced process(es): ${fresh[*]}" >&2
  printf '%s\n' "${fresh[@]}" >>"$stopped"
  kill -STOP "${fresh[@]}" 2>/dev/null
}
watcher=""
resume() {
  [[ -n $watcher ]] && kill "$watcher" 2>/dev/null && wait "$watcher" 2>/dev/null
  mapfile -t all <"$stopped"
  ((${#all[@]})) && kill -CONT "${all[@]}" 2>/dev/null
  rm -f "$stopped"
}
trap resume EXIT INT TERM
stop_new
( while sleep 0.5; do stop_new; done ) &
watcher=$!
"$@"
