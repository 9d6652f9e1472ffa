#!/bin/bash
# Issue 40: SameBitsStep across an elastic 2 -> 1 -> 2 re-formation gives
# bitwise the state of a fixed 1-worker run. lockstep-test-same-bits-worker
# elastic (same_bits_worker.cc) runs 24 steps under run_elastic with a
# commit per step; rank 0 asks the discovery script for one slot after step
# 8 (scale-down removes rank 1 at a commit) and for two after step 16 (a new
# worker joins and receives the state by broadcast), and the workers step
# no further until the world has that size, so steps 0-7 run at 2 workers,
# 8-15 at 1 and 16-23 at 2 whatever the timing.
# usage: same_bits_elastic_test.sh BIN_DIR WORKER
set -u
bin=$1
worker=$2
out=$(mktemp -d)
trap '[ -n "${KEEP_OUT:-}" ] || rm -rf "$out"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
show() { sed 's/^/    /' "$1" | tail -40; }

hash_of() { grep -o "state hash: [0-9a-f]*" "$1" | head -1 | cut -d' ' -f3; }

export LOCKSTEP_BIND_TO=none LOCKSTEP_INTRA_OP_THREADS=1
timeout 200 "$bin/lockstep" run -np 1 "$worker" on > "$out/fixed.log" 2>&1 ||
  { fail "the fixed 1-worker run exited $?"; show "$out/fixed.log"; }
fixed=$(hash_of "$out/fixed.log")
echo "fixed np 1: ${fixed:-none}"

mkdir -p "$out/phase"
discovery=$out/discover.sh  # a file: the launcher runs the script under timeout(1)
cat > "$discovery" <<SCRIPT
#!/bin/sh
if [ -e $out/phase/grow ]; then echo localhost:2; elif [ -e $out/phase/shrink ]; then echo localhost:1; else echo localhost:2; fi
SCRIPT
chmod +x "$discovery"
SAME_BITS_PHASE_DIR=$out/phase timeout 250 "$bin/lockstep" run -np 2 --min-np 1 --max-np 2 \
  --discovery-interval 1 --host-discovery-script "$discovery" "$worker" elastic \
  > "$out/elastic.log" 2>&1
status=$?
elastic=$(hash_of "$out/elastic.log")
echo "elastic 2 -> 1 -> 2: exit $status, ${elastic:-none}"
[ $status -eq 0 ] || { fail "the elastic run exited $status"; show "$out/elastic.log"; }
grep -q "rank 0 size 1 at step 8 (phase 1)" "$out/elastic.log" ||
  { fail "the world did not shrink to 1 worker at step 8"; show "$out/elastic.log"; }
[ "$(grep -c "size 2 at step 16 (phase 2)" "$out/elastic.log")" = 2 ] ||
  { fail "the world did not grow back to 2 workers at step 16"; show "$out/elastic.log"; }
[ -n "$fixed" ] && [ "$elastic" = "$fixed" ] ||
  fail "the elastic run's state hash '${elastic}' is not the fixed run's '${fixed}'"

if [ $failures -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "the same bits across 2 -> 1 -> 2"
