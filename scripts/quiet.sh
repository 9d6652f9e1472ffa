#!/usr/bin/env bash
# Runs a benchmark under the bench lock: one timed command at a time on this
# machine (an exclusive flock on $LOCKSTEP_BENCH_LOCK, default
# /tmp/lockstep-bench.lock), so two benchmarks never time each other. Waits
# for the lock, saying so every 30 s.
#   scripts/quiet.sh COMMAND [ARGS...]
set -euo pipefail
(($#)) || { echo "usage: scripts/quiet.sh COMMAND [ARGS...]" >&2; exit 2; }
lock=${LOCKSTEP_BENCH_LOCK:-/tmp/lockstep-bench.lock}
exec 9>>"$lock"
until flock -w 30 9; do echo "quiet.sh: waiting for the bench lock $lock" >&2; done
"$@"
