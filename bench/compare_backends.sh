#!/usr/bin/env bash
# Allreduce bus bandwidth of every transport on the same sizes, in one run:
#   shm            shared memory (one host)
#   mpi            Open MPI (mpirun), nonblocking calls polled by lockstep's watchdog
#   gloo           Gloo over TCP (loopback here), file-store rendezvous
#   hier-mpi/gloo  hierarchical allreduce on faked hosts: 2 hosts x NP/2 ranks
#                  (shm inside a fake host, mpi or gloo between them)
# Each backend runs `lockstep bench allreduce --json --backend X` ROUNDS times;
# the table shows the median busbw (GB/s, nccl-tests convention) per size.
#
#   bench/compare_backends.sh [-np 4] [--sizes 4KiB:64MiB] [--factor 4] [--rounds 1]
#                             [--seconds 0.2] [--backends "shm mpi gloo hier-mpi hier-gloo"]
#                             [--build build]
#
# Workers are started here with LOCKSTEP_* variables (no `lockstep run`), so
# the script also works while the launcher is being built; the MPI runs go
# through mpirun and set LOCKSTEP_* from OMPI_COMM_WORLD_* per rank.
set -euo pipefail
np=4 sizes=4KiB:64MiB factor=4 rounds=1 seconds=0.2 build=build
backends="shm mpi gloo hier-mpi hier-gloo"
while (($#)); do
  case $1 in
    -np) np=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --factor) factor=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --backends) backends=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "compare_backends: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
bin=$(cd "$build/bin" && pwd)
[[ -x $bin/lockstep ]] || { echo "compare_backends: build $build/bin/lockstep first" >&2; exit 1; }
((np % 2 == 0)) || { echo "compare_backends: -np must be even (hierarchical fakes 2 hosts)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
bench=("$bin/lockstep" bench allreduce --json --sizes "$sizes" --factor "$factor" --seconds "$seconds")

# spawn NAME LOCAL_SIZE BACKEND [VAR=VALUE...]: NP workers with LOCKSTEP_*;
# LOCAL_SIZE < NP fakes NP/LOCAL_SIZE hosts.
spawn() {
  local name=$1 local_size=$2 backend=$3; shift 3
  local job="cmp$$${name//-/}" store pids=()
  store=$(mktemp -d "$out/store.XXXX")
  for ((r = 0; r < np; r++)); do
    env LOCKSTEP_RANK=$r LOCKSTEP_SIZE=$np LOCKSTEP_LOCAL_RANK=$((r % local_size)) \
      LOCKSTEP_LOCAL_SIZE=$local_size LOCKSTEP_CROSS_RANK=$((r / local_size)) \
      LOCKSTEP_CROSS_SIZE=$((np / local_size)) LOCKSTEP_JOB_ID=$job \
      LOCKSTEP_GLOO_FILE_STORE=$store "$@" "${bench[@]}" --backend "$backend" \
      >>"$out/$name.$r.json" &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$out/$name.0.json" >>"$out/$name.json"
  return $rc
}

# mpirun NP workers; LOCAL_SIZE < NP fakes hosts as above.
spawn_mpi() {
  local name=$1 local_size=$2; shift 2
  local flags=(--oversubscribe --bind-to none)
  [[ $(id -u) == 0 ]] && flags+=(--allow-run-as-root)
  mpirun "${flags[@]}" -np "$np" -x LOCKSTEP_HIERARCHICAL="${LOCKSTEP_HIERARCHICAL:-auto}" \
    bash -c 'r=$OMPI_COMM_WORLD_RANK; L='"$local_size"'
      export LOCKSTEP_RANK=$r LOCKSTEP_SIZE=$OMPI_COMM_WORLD_SIZE LOCKSTEP_LOCAL_RANK=$((r % L))
      export LOCKSTEP_LOCAL_SIZE=$L LOCKSTEP_CROSS_RANK=$((r / L))
      export LOCKSTEP_CROSS_SIZE=$((OMPI_COMM_WORLD_SIZE / L)) LOCKSTEP_JOB_ID=cmpmpi$OMPI_MCA_ess_base_jobid
      exec "$@"' _ "${bench[@]}" --backend mpi >>"$out/$name.json"
}

for ((round = 1; round <= rounds; round++)); do
  for b in $backends; do
    echo "round $round/$rounds: $b" >&2
    case $b in
      shm) spawn shm "$np" shm ;;
      gloo) spawn gloo "$np" gloo LOCKSTEP_HIERARCHICAL=0 ;;
      mpi) LOCKSTEP_HIERARCHICAL=0 spawn_mpi mpi "$np" ;;
      hier-gloo) spawn hier-gloo $((np / 2)) gloo LOCKSTEP_HIERARCHICAL=1 ;;
      hier-mpi) LOCKSTEP_HIERARCHICAL=1 spawn_mpi hier-mpi $((np / 2)) ;;
      *) echo "compare_backends: unknown backend $b" >&2; exit 2 ;;
    esac || echo "compare_backends: $b failed (see above); its column stays empty" >&2
  done
done

python3 - "$out" "$np" $backends <<'PY'
import json, os, statistics, sys
out, np, names = sys.argv[1], sys.argv[2], sys.argv[3:]
runs = {}
for n in names:
    path = os.path.join(out, n + ".json")
    if not os.path.exists(path):
        continue
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            runs.setdefault(n, {}).setdefault(j["bytes"], []).append(j["busbw_gbps"])
sizes = sorted({b for r in runs.values() for b in r})
def human(b):
    for unit, s in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << s and b % (1 << s) == 0:
            return f"{b >> s}{unit}"
    return f"{b}B"
print(f"# allreduce f32 sum, np={np}, busbw GB/s (median over rounds)")
print(f"{'size':>8} " + " ".join(f"{n:>10}" for n in names))
for b in sizes:
    cells = []
    for n in names:
        v = runs.get(n, {}).get(b)
        cells.append(f"{statistics.median(v):>10.3f}" if v else f"{'-':>10}")
    print(f"{human(b):>8} " + " ".join(cells))
PY
