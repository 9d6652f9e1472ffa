#!/bin/bash
# Workers started with torchrun's variables, without `lockstep run` (issue 45
# item 6): they used to run as 1-rank jobs each, rc 0.
#   1. two hand-started workers (RANK, WORLD_SIZE, LOCAL_*, MASTER_*) form one
#      2-rank job over shared memory; the allreduce gives the sum;
#   2. the same without LOCAL_* (one process a pod): each is a host of its
#      own, so they meet over gloo;
#   3. LOCKSTEP_SECRET given to both: no secret file is written; a stale
#      file of a killed job does not stop the next one;
#   4. WORLD_SIZE=3 with two workers fails within LOCKSTEP_TIMEOUT, naming
#      how many arrived and the missing rank;
#   5. WORLD_SIZE=2 without MASTER_ADDR refuses to run alone, naming it;
#   6. rank 0 missing: rank 1 fails in time, asking whether rank 0 runs;
#   7. real torchrun (--no-python), where installed: its agent keeps its own
#      store on MASTER_PORT, the workers use MASTER_PORT + 1.
# usage: torchrun_test.sh BIN_DIR
set -u
worker=$(realpath "$1")/lockstep-test-slurm-worker
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
check() {  # check NAME FILE REGEX
  grep -Eq "$3" "$2" || { fail "$1: expected /$3/ in:"; sed "s/^/    /" "$2" | tail -20; }
}
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_ranks NAME "RANKS" ENV... : workers of those RANKs, logs in $out/NAME.
# LOCAL=1 in ENV gives them LOCAL_RANK=RANK of LOCAL_WORLD_SIZE=2.
start_ranks() {
  local name=$1 ranks=$2; shift 2
  local port; port=$(free_port)
  mkdir -p "$out/$name"
  for r in $ranks; do
    local locals=()
    [[ " $* " == *" LOCAL=1 "* ]] && locals=(LOCAL_RANK=$r LOCAL_WORLD_SIZE=2)
    (cd "$out/$name" && env -u LOCKSTEP_RANK -u LOCKSTEP_SIZE RANK=$r WORLD_SIZE=2 \
       MASTER_ADDR=127.0.0.1 MASTER_PORT=$port LOCKSTEP_TIMEOUT=5 "${locals[@]}" "$@" \
       timeout 60 "$worker" > "$out/$name/rank$r.log" 2>&1; echo $? > "$out/$name/rank$r.rc") &
  done
  wait
}
rc_of() { cat "$out/$1/rank$2.rc"; }
expect_sum() {  # expect_sum NAME BACKEND
  for r in 0 1; do
    [ "$(rc_of "$1" $r)" = 0 ] || fail "$1: rank $r exit $(rc_of "$1" $r)"
    check "$1" "$out/$1/rank$r.log" "^rank $r/2 .* backend $2 job torchrun[0-9a-f]+ sum 3$"
  done
  if ls -A "$out/$1" | grep -q '^\.lockstep-rendezvous'; then fail "$1: secret file left behind"; fi
}

# 1, 2, 3.
start_ranks shm "0 1" LOCAL=1
expect_sum shm shm
check shm "$out/shm/rank1.log" "local 1/2 host 0/1"
start_ranks pods "0 1"
expect_sum pods gloo
check pods "$out/pods/rank1.log" "local 0/1 host 1/2"
mkdir -p "$out/secret"
secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
# A file left by an earlier job must not be read when the secret is given.
printf 'lockstep-rendezvous 1\n127.0.0.1:1\nbad\n' > "$out/secret/marker"
start_ranks secret "0 1" LOCKSTEP_SECRET=$secret LOCKSTEP_RENDEZVOUS_DIR="$out/secret/dir"
expect_sum secret gloo
[ -e "$out/secret/dir" ] && fail "secret: a rendezvous file was written though LOCKSTEP_SECRET was given"

# 3b. A secret file left by a killed job on the same address: the store
#     refuses its secret, and rank 1 reads the file again until rank 0's.
stale_port=$(free_port)
mkdir -p "$out/stale"
stale="$out/stale/.lockstep-rendezvous-torchrun-127.0.0.1-$stale_port"
(umask 077; printf 'lockstep-rendezvous 1\n127.0.0.1:%s\n%064d\n' "$stale_port" 0 > "$stale")
# Rank 1 starts first, so it normally reads the stale file before rank 0
# replaces it.
for r in 1 0; do
  (cd "$out/stale" && RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
     MASTER_PORT=$stale_port LOCKSTEP_TIMEOUT=10 timeout 60 "$worker" > "$out/stale/rank$r.log" 2>&1
   echo $? > "$out/stale/rank$r.rc") &
  sleep 1
done
wait
expect_sum stale shm
# (rank 0 then logs the refused stale secret; not checked: a slow start of
# rank 1 would find rank 0's file first, which must pass too)

# 4. Two workers of a job of three: both fail in time, naming rank 2.
start=$(date +%s)
start_ranks short "0 1" WORLD_SIZE=3 LOCKSTEP_TIMEOUT=3
took=$(( $(date +%s) - start ))
for r in 0 1; do
  [ "$(rc_of short $r)" = 0 ] && fail "short: rank $r exited 0"
  check short "$out/short/rank$r.log" "2 of WORLD_SIZE=3 ranks arrived within 3 s \(LOCKSTEP_TIMEOUT\); missing rank\(s\): 2\."
done
[ $took -le 30 ] || fail "short: took $took s"

# 5. No MASTER_ADDR: refuse to run as a job of one.
mkdir -p "$out/nomaster"
(cd "$out/nomaster" && env -u MASTER_ADDR RANK=0 WORLD_SIZE=2 MASTER_PORT=1 timeout 30 "$worker" \
   > log 2>&1; echo $? > rc)
[ "$(cat "$out/nomaster/rc")" = 0 ] && fail "nomaster: exited 0"
check nomaster "$out/nomaster/log" "WORLD_SIZE=2 but MASTER_ADDR or MASTER_PORT is not set"

# 6. Only rank 1.
start_ranks alone "1" LOCKSTEP_TIMEOUT=2 LOCKSTEP_SECRET=$secret
[ "$(rc_of alone 1)" = 0 ] && fail "alone: rank 1 exited 0"
check alone "$out/alone/rank1.log" "torchrun rendezvous at 127.0.0.1:[0-9]+ \(rank 1\): .*is rank 0 running"

# 7. Real torchrun.
if [ -x /usr/bin/torchrun ]; then
  mkdir -p "$out/torchrun"
  # --redirects 1 --tee 1: Debian's torchrun 1.13 under Python 3.11 cannot
  # parse the default "0" (a zero IntFlag member no longer iterates).
  (cd "$out/torchrun" && LOCKSTEP_TIMEOUT=20 timeout 120 /usr/bin/torchrun --nproc_per_node=2 \
     --master_port="$(free_port)" --redirects 1 --tee 1 --no_python "$worker" > log 2>&1
   echo $? > rc)
  [ "$(cat "$out/torchrun/rc")" = 0 ] || fail "torchrun: exit $(cat "$out/torchrun/rc")"
  for r in 0 1; do check torchrun "$out/torchrun/log" "rank $r/2 local $r/2 host 0/1 backend shm .*sum 3$"; done
else
  echo "torchrun not installed: case 7 skipped"
fi

for f in "$out"/*/rank*.log; do echo "--- $f"; cat "$f"; done | head -60
[ $failures -eq 0 ] && echo "torchrun_test: all passed" || echo "torchrun_test: $failures failure(s)"
[ $failures -eq 0 ]
