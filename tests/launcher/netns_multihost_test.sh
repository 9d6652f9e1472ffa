#!/usr/bin/env bash
# Multi-host `lockstep run` across real, separate network stacks: two network
# namespaces ("hosts") joined to a bridge in this namespace (where the
# launcher runs) by veth pairs. Needs root and `ip netns`; anywhere else it
# says why and exits 77, which ctest reports as skipped.
#
#   netns_multihost_test.sh BIN_DIR
set -uo pipefail
BIN=${1:?usage: netns_multihost_test.sh BIN_DIR}
LOCKSTEP=$BIN/lockstep
MATRIX=$BIN/lockstep-test-matrix-worker
WORKER=$BIN/lockstep-test-worker

skip() { echo "SKIPPED: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "multi-host namespace test needs root (ip netns add)"
command -v ip >/dev/null || skip "iproute2 (ip) is not installed"

id=$$
NS1=lsA$id; NS2=lsB$id; NS_DEAD=lsC$id; BR=lsbr$id
NET=10.$(( (id >> 8) % 200 + 20 )).$(( id % 250 + 1 ))
LAUNCHER_IP=$NET.1

cleanup() {
  for ns in $NS1 $NS2 $NS_DEAD; do
    ip netns pids $ns 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del $ns 2>/dev/null
  done
  ip link del $BR 2>/dev/null
}
trap cleanup EXIT

ip netns add $NS1 2>/dev/null || skip "this machine does not permit network namespaces"
ip link add $BR type bridge || skip "cannot create a bridge here"
ip addr add $LAUNCHER_IP/24 dev $BR && ip link set $BR up
i=10
for ns in $NS1 $NS2; do
  [[ $ns == $NS1 ]] || ip netns add $ns
  ip link add v$i$id type veth peer name eth0 netns $ns
  ip link set v$i$id master $BR up
  ip -n $ns addr add $NET.$i/24 dev eth0
  ip -n $ns link set eth0 up
  ip -n $ns link set lo up
  i=$((i + 1))
done

failures=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then echo "ok: $name"; else echo "FAILED: $name"; failures=$((failures + 1)); fi
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

run_job() {  # run_job OUTFILE LOCKSTEP-RUN-ARGS...; sets status and teardown_ms
  local out=$1; shift
  timeout 300 "$LOCKSTEP" run --remote-exec 'ip netns exec {host}' --rendezvous-addr $LAUNCHER_IP \
    --timeout 60 "$@" >"$out" 2>&1 &
  local pid=$! failed_at=""
  while kill -0 $pid 2>/dev/null; do
    [[ -z $failed_at ]] && grep -q "stopping the other workers" "$out" && failed_at=$(now_ms)
    sleep 0.05
  done
  wait $pid
  status=$?
  teardown_ms=$(( $(now_ms) - ${failed_at:-$(now_ms)} ))
  sed 's/^/    | /' "$out" | tail -n ${TAIL_LINES:-40}
}

tmp=$(mktemp -d)
trap 'cleanup; rm -rf $tmp' EXIT
FILTER='--gtest_filter=Matrix.Allreduce:Matrix.Broadcast:Matrix.Allgather:Matrix.ReduceScatter:Matrix.Alltoall:Matrix.SendRecvBarrier'

echo "== hierarchical (shm inside each namespace + Gloo between them)"
run_job $tmp/hier -H $NS1:2,$NS2:2 --backend auto -- "$MATRIX" "$FILTER"
check "hierarchical job exits 0" test $status -eq 0
check "hierarchical path ran" grep -q "backend=hierarchical-gloo size=4" $tmp/hier
check "every rank passed" test "$(grep -c '\[  PASSED  \] 6 tests' $tmp/hier)" -eq 4

echo "== flat Gloo across the namespaces"
run_job $tmp/flat -H $NS1:2,$NS2:2 --backend gloo --hierarchical 0 -- "$MATRIX" "$FILTER"
check "flat job exits 0" test $status -eq 0
check "flat path ran" grep -q "backend=gloo size=4" $tmp/flat
check "every rank passed" test "$(grep -c '\[  PASSED  \] 6 tests' $tmp/flat)" -eq 4

echo "== hostfile, 3 ranks on uneven hosts (flat Gloo)"
printf "# two hosts\n%s slots=2\n%s slots=1\n" $NS1 $NS2 >$tmp/hostfile
run_job $tmp/hf --hostfile $tmp/hostfile -- "$WORKER" --iterations 5 --mib 1
check "hostfile job exits 0" test $status -eq 0
check "three ranks finished" test "$(grep -c 'rank [0-9] done' $tmp/hf)" -eq 3

echo "== SIGKILL of a remote worker tears every host down"
run_job $tmp/kill -H $NS1:2,$NS2:2 -- "$WORKER" --die-rank 3 --die-after-ms 1500 --mib 4
check "killed job fails" test $status -ne 0
check "launcher names the host and rank" grep -q "rank 3 on host $NS2 .*exited with code 137" $tmp/kill
check "the host reports the signal" grep -q "was killed by signal 9" $tmp/kill
check "a survivor names the dead rank" grep -qi "rank 3" <(grep -v "lockstep run:\|remote-worker:" $tmp/kill)
echo "    teardown took ${teardown_ms} ms after the launcher saw the failure"
check "every host torn down within 5 s" test $teardown_ms -lt 5000
sleep 0.5
check "no worker left in $NS1" test -z "$(ip netns pids $NS1)"
check "no worker left in $NS2" test -z "$(ip netns pids $NS2)"
check "no shared memory left" test -z "$(ls /dev/shm | grep "^lockstep-" | grep -f <(grep -o 'job=[0-9a-f]*' $tmp/kill | cut -d= -f2) 2>/dev/null)"

echo "== elastic: losing a whole host re-forms the job on the other one"
ELASTIC=$BIN/lockstep-test-elastic-engine-worker
timeout 120 "$LOCKSTEP" run --remote-exec 'ip netns exec {host}' --rendezvous-addr $LAUNCHER_IP \
  -H $NS1:2,$NS2:2 --min-np 2 -x ELASTIC_TEST_STEPS=100 -x ELASTIC_TEST_STEP_MS=50 \
  -- "$ELASTIC" >$tmp/elastic 2>&1 &
elastic_pid=$!
sleep 2.5
ip netns pids $NS2 | xargs -r kill -9
wait $elastic_pid
status=$?
sed 's/^/    | /' $tmp/elastic | tail -n 25
check "elastic job survives the host and exits 0" test $status -eq 0
check "launcher re-forms once with the 2 survivors" grep -q "re-forming the job with the 2 remaining worker(s)" $tmp/elastic
check "survivors finish every step together" grep -Eq "done generation=1 size=2 steps=100 .* agree=1" $tmp/elastic
grep -o "formed [0-9]* ms after the error" $tmp/elastic | sed 's/^/    recovery: /'

echo "== elastic: a host added by the discovery script joins the job"
timeout 120 "$LOCKSTEP" run --remote-exec 'ip netns exec {host}' --rendezvous-addr $LAUNCHER_IP \
  -H $NS1:2 --min-np 2 --max-np 4 --host-discovery-script "printf '$NS1:2\\n$NS2:2\\n'" \
  --discovery-interval 1 -x ELASTIC_TEST_STEPS=100 -x ELASTIC_TEST_STEP_MS=50 \
  -- "$ELASTIC" >$tmp/grow 2>&1
status=$?
sed 's/^/    | /' $tmp/grow | tail -n 12
check "grown job exits 0" test $status -eq 0
check "launcher starts 2 workers on the new host" grep -q "discovered 2 free slot(s) ($NS2,$NS2)" $tmp/grow
check "all 4 finish every step together" grep -Eq "done generation=1 size=4 steps=100 .* reformations=1 agree=1" $tmp/grow

echo "== elastic: a host the discovery script stops listing leaves the job"
printf '%s:2\n%s:2\n' $NS1 $NS2 >$tmp/hosts
timeout 120 "$LOCKSTEP" run --remote-exec 'ip netns exec {host}' --rendezvous-addr $LAUNCHER_IP \
  -H $NS1:2,$NS2:2 --min-np 2 --host-discovery-script "cat $tmp/hosts" --discovery-interval 0.5 \
  -x ELASTIC_TEST_STEPS=100 -x ELASTIC_TEST_STEP_MS=50 -- "$ELASTIC" >$tmp/shrink 2>&1 &
shrink_pid=$!
sleep 2
printf '%s:2\n' $NS1 >$tmp/hosts
wait $shrink_pid
status=$?
sed 's/^/    | /' $tmp/shrink | tail -n 10
check "shrunk job exits 0" test $status -eq 0
check "launcher removes the 2 workers of $NS2" grep -q "no longer offers room for w2 on $NS2, w3 on $NS2" $tmp/shrink
check "the other 2 finish every step together" grep -Eq "done generation=1 size=2 steps=100 .* agree=1" $tmp/shrink

echo "== a host that never comes up is named at --start-timeout"
cat >$tmp/remote.sh <<EOS
#!/bin/sh
# Like 'ip netns exec HOST', except that host $NS_DEAD hangs as a dead ssh would.
host=\$1; shift
[ "\$host" = "$NS_DEAD" ] && exec sleep 60
exec ip netns exec "\$host" "\$@"
EOS
chmod +x $tmp/remote.sh
start=$(date +%s)
timeout 120 "$LOCKSTEP" run -H $NS1:1,$NS_DEAD:1 --remote-exec "$tmp/remote.sh {host}" \
  --rendezvous-addr $LAUNCHER_IP --start-timeout 3 -- "$WORKER" >$tmp/dead 2>&1
status=$?
elapsed=$(( $(date +%s) - start ))
sed 's/^/    | /' $tmp/dead
check "start timeout fails the job" test $status -ne 0
check "message names the missing host" grep -q "host(s) $NS_DEAD (ranks 1) did not start" $tmp/dead
check "job ends soon after the timeout" test $elapsed -lt 15

rm -rf $tmp
if ((failures)); then echo "$failures check(s) failed"; exit 1; fi
echo "all multi-host checks passed"
