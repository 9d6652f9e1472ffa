#!/usr/bin/env bash
# lockstep under a real single-node Slurm (docs/slurm.md): starts munged,
# slurmctld and slurmd from a generated slurm.conf in a scratch directory
# (about a second), then checks
#   1. plain `srun -n 2`: rank, size and local rank from Slurm (shm);
#   2. plain `srun -n 2` with the gloo backend: task 0's store reached through
#      its 0600 rendezvous file, which is gone afterwards;
#   3. `lockstep run` inside `salloc -n 2`: hosts and slots from the
#      allocation, every rank started through srun;
#   4. the main job both ways, on a small subset.
# Exits 77 (skipped, with the reason) where the daemons cannot run: not root,
# or slurm-wlm/munge not installed (scripts/setup.sh installs them).
#
#   slurm_test.sh BIN_DIR
set -uo pipefail
bin=$(cd "$1" && pwd)
skip() { echo "SKIPPED: $*"; exit 77; }
[[ $(id -u) == 0 ]] || skip "needs root to start slurmd and munged"
for tool in munged mungekey slurmctld slurmd srun salloc sinfo ss; do
  command -v "$tool" > /dev/null || skip "$tool not installed (apt-get install slurm-wlm munge)"
done

dir=$(mktemp -d /tmp/lockstep-slurm-XXXXXX)
chmod 700 "$dir"
daemons=()  # run in the foreground as our children, so they are ours to stop and reap
stop() {  # SIGTERM, then SIGKILL after 3 s
  kill "$1" 2> /dev/null || return 0
  for _ in $(seq 30); do
    kill -0 "$1" 2> /dev/null || break
    sleep 0.1
  done
  kill -9 "$1" 2> /dev/null
  wait "$1" 2> /dev/null
}
cleanup() {  # jobs finish, then slurmd and slurmctld before munged, which they need
  if [[ -n ${SLURM_CONF:-} ]]; then
    for _ in $(seq 50); do [[ -z $(squeue -h 2> /dev/null) ]] && break; sleep 0.1; done
  fi
  for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do stop "${daemons[i]}"; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAILED: $*"
  for log in "$dir"/*.log "$dir"/*.out; do echo "--- $log"; tail -20 "$log"; done
  exit 1
}

started=$(date +%s%N)
mkdir -p "$dir/munge" "$dir/state" "$dir/spool" && chmod 700 "$dir/munge"
mungekey -c -k "$dir/munge/munge.key" || skip "mungekey failed"
munged -F -f --socket="$dir/munge/socket" --key-file="$dir/munge/munge.key" \
  --log-file="$dir/munged.log" --pid-file="$dir/munged.pid" --seed-file="$dir/munge/seed" \
  > "$dir/munged.out" 2>&1 &
daemons+=($!)
for _ in $(seq 50); do [[ -S $dir/munge/socket ]] && break; sleep 0.05; done
[[ -S $dir/munge/socket ]] || skip "munged does not start here: $(tail -3 "$dir/munged.log")"
free_port() {  # a random port nothing listens on
  local port
  while :; do
    port=$((20000 + RANDOM % 40000))
    ss -ltnH "sport = :$port" | grep -q . || { echo "$port"; return; }
  done
}
ctld_port=$(free_port)
slurmd_port=$(free_port)
[[ $slurmd_port != "$ctld_port" ]] || slurmd_port=$((ctld_port + 1))
host=$(hostname -s)
cat > "$dir/slurm.conf" <<CONF
ClusterName=lockstepci
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
InactiveLimit=0
KillWait=5
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -i > "$dir/slurmctld.out" 2>&1 &
daemons+=($!)
slurmd -D > "$dir/slurmd.out" 2>&1 &
daemons+=($!)
for _ in $(seq 100); do
  [[ $(sinfo -h -o %T 2> /dev/null) == idle ]] && break
  sleep 0.1
done
[[ $(sinfo -h -o %T) == idle ]] || fail "the node did not come up: $(sinfo 2>&1)"
echo "slurm: up in $(( ($(date +%s%N) - started) / 1000000 )) ms"

work=$dir/work
mkdir -p "$work" && cd "$work" || exit 1
unset LOCKSTEP_RANK LOCKSTEP_SIZE LOCKSTEP_JOB_ID LOCKSTEP_RENDEZVOUS LOCKSTEP_SECRET
worker=$bin/lockstep-test-slurm-worker

echo "== 1. srun -n 2, shared memory"
out=$(srun -n 2 "$worker" 2>&1) || fail "srun -n 2: $out"
echo "$out"
for r in 0 1; do
  grep -q "^rank $r/2 local $r/2 host 0/1 backend shm job slurm[0-9]*-0 sum 3$" <<< "$out" \
    || fail "rank $r's world from Slurm"
done

echo "== 2. srun -n 2, gloo through task 0's store and its 0600 file"
out=$(LOCKSTEP_BACKEND=gloo srun -n 2 "$worker" 2>&1) || fail "srun gloo: $out"
echo "$out"
grep -q "^rank 1/2 local 1/2 host 0/1 backend gloo job slurm[0-9]*-0 sum 3$" <<< "$out" \
  || fail "gloo world from Slurm"
leftover=$(ls -A "$work")
[[ -z $leftover ]] || fail "rendezvous file left behind: $leftover"
touch "$work/.lockstep-rendezvous-999.0" && chmod 644 "$work/.lockstep-rendezvous-999.0"
out=$(SLURM_JOB_ID=999 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_NNODES=1 \
      LOCKSTEP_BACKEND=gloo LOCKSTEP_TIMEOUT=2 "$worker" 2>&1) && fail "accepted a 0644 file"
grep -q "refusing .*lockstep-rendezvous-999.0: it must belong to this user and be readable by nobody else (mode 0600), but has owner 0 and mode 644" <<< "$out" \
  || fail "a world-readable rendezvous file was not refused clearly: $out"
rm -f "$work/.lockstep-rendezvous-999.0"

echo "== 3. lockstep run inside salloc -n 2"
out=$(salloc -n 2 "$bin/lockstep" run --verbose "$worker" 2>&1) || fail "lockstep run in salloc: $out"
echo "$out"
grep -q "starting 2 worker(s) of '$worker' through srun (Slurm allocation)" <<< "$out" \
  || fail "lockstep run did not use the allocation"
for r in 0 1; do
  grep -q "\[$r\]: rank $r/2 local $r/2 host 0/1 backend shm job [0-9a-f]* sum 3$" <<< "$out" \
    || fail "rank $r under lockstep run"
done

# The sanitizer builds have no LibTorch and so no main job; the main build
# runs this part.
if [[ -x $bin/lockstep-fashion-mnist ]]; then
  echo "== 4. the main job: srun, and lockstep run in an allocation"
  main=(--epochs 1 --train-subset 512 --test-subset 256)
  out=$(srun -n 2 "$bin/lockstep-fashion-mnist" "${main[@]}" 2>&1) || fail "main job under srun: $out"
  echo "$out" | tail -3
  out=$(salloc -n 2 "$bin/lockstep" run "$bin/lockstep-fashion-mnist" "${main[@]}" 2>&1) \
    || fail "main job under lockstep run in salloc: $out"
  echo "$out" | tail -3
else
  echo "== 4. skipped: no $bin/lockstep-fashion-mnist (a build without LibTorch)"
fi
echo "slurm test: ok in $(( ($(date +%s%N) - started) / 1000000 )) ms"
