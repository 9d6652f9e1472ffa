#!/bin/bash
# Issue 30.1: an elastic torch job grown from 2 to 3 workers by discovery.
#   1. the learning rate set in ElasticState::on_reset: every rank ends on
#      one rate (3 * 0.01) and bitwise the same parameters;
#   2. the rate set as a Horovod port without reset callbacks does (the
#      joiner keeps rank 0's old rate from sync()): the ranks would train
#      different models; the fingerprint check at the first commit after the
#      re-formation stops the job naming a parameter, with its own advice
#      (on_reset, not the broadcast_parameters that sync() just did).
# usage: elastic_growth_test.sh BIN_DIR
set -u
bin=$1
worker=$bin/lockstep-test-elastic-growth-worker
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0
fail() { echo "FAIL: $*"; sed 's/^/    /' "$2" | tail -40; failures=$((failures + 1)); }

grow() {  # grow NAME ENV...: a 2-worker job that discovery grows to 3
  local name=$1; shift
  env "$@" ELASTIC_GROWTH_STARTED_FILE="$out/$name.started" timeout 150 "$bin/lockstep" run \
    -np 2 --min-np 1 --max-np 3 --discovery-interval 1 \
    --host-discovery-script "test -e $out/$name.started && echo localhost:3 || echo localhost:2" \
    "$worker" > "$out/$name.log" 2>&1
}

grow on_reset
status=$?
echo "case on_reset: exit $status"
[ $status -eq 0 ] || fail "on_reset: exit $status, expected 0" "$out/on_reset.log"
lines=$(grep -c "growth-worker: rank [0-2] size 3 generation 1 .* lr 0.0300 " "$out/on_reset.log")
[ "$lines" = 3 ] || fail "on_reset: expected 3 ranks at size 3 and lr 0.03, got $lines" "$out/on_reset.log"
digests=$(grep -o "params [-0-9.e]*" "$out/on_reset.log" | sort -u | wc -l)
[ "$digests" = 1 ] || fail "on_reset: the ranks' parameters differ" "$out/on_reset.log"

grow natural_port ELASTIC_GROWTH_NATURAL_PORT=1
status=$?
echo "case natural_port: exit $status"
[ $status -ne 0 ] || fail "natural_port: exit 0: the ranks trained different models silently" "$out/natural_port.log"
grep -q "parameters differ across ranks at the first commit of generation 1 .*ElasticState::on_reset" "$out/natural_port.log" ||
  fail "natural_port: expected the fingerprint check to name the divergence" "$out/natural_port.log"
# sync() just broadcast the parameters: its advice is on_reset, never another broadcast.
grep "parameters differ across ranks" "$out/natural_port.log" | grep -q "broadcast_parameters" &&
  fail "natural_port: the after-sync() error advises broadcast_parameters" "$out/natural_port.log"

if [ $failures -ne 0 ]; then echo "$failures check(s) failed"; exit 1; fi
echo "all elastic growth checks passed"
