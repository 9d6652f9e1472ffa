#!/usr/bin/env bash
# lockstep's shared-memory allreduce vs Open MPI's MPI_Allreduce, same sizes,
# same statistics, interleaved in one run (the machine is shared and noisy:
# each size is measured ROUNDS times per side and the medians compared).
#
#   bench/compare_mpi.sh [-np N] [--sizes 8B:256MiB] [--rounds 3] [--build build]
set -euo pipefail
np=2 sizes=8B:256MiB rounds=3 build=build seconds=0.2
while (($#)); do
  case $1 in
    -np) np=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "compare_mpi: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
bin=$build/bin
[[ -x $bin/lockstep && -x $bin/lockstep-mpi-allreduce ]] || {
  echo "compare_mpi: build first (bash scripts/setup.sh); need $bin/lockstep and $bin/lockstep-mpi-allreduce" >&2
  exit 1
}
root_flag=(); [[ $(id -u) == 0 ]] && root_flag=(--allow-run-as-root)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds: lockstep" >&2
  "$bin/lockstep" run -np "$np" --no-prefix-output -- "$bin/lockstep" bench allreduce \
    --sizes "$sizes" --seconds "$seconds" --json >>"$out/lockstep.json"
  echo "round $r/$rounds: open mpi" >&2
  mpirun "${root_flag[@]}" --oversubscribe -np "$np" "$bin/lockstep-mpi-allreduce" \
    --sizes "$sizes" --seconds "$seconds" >>"$out/mpi.json"
done
python3 - "$out/lockstep.json" "$out/mpi.json" <<'PY'
import json, statistics, sys
def load(path):
    runs = {}
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        runs.setdefault(j["bytes"], []).append(j)
    return runs
ls, mpi = load(sys.argv[1]), load(sys.argv[2])
med = lambda rows, k: statistics.median(r[k] for r in rows)
print(f"{'bytes':>10} {'lockstep us':>12} {'mpi us':>12} {'lockstep busbw':>15} {'mpi busbw':>10} {'bw ratio':>9}")
for b in sorted(set(ls) & set(mpi)):
    l_us, m_us = med(ls[b], "median_us"), med(mpi[b], "median_us")
    l_bw, m_bw = med(ls[b], "busbw_gbps"), med(mpi[b], "busbw_gbps")
    print(f"{b:>10} {l_us:>12.2f} {m_us:>12.2f} {l_bw:>15.3f} {m_bw:>10.3f} {l_bw / m_bw:>9.2f}")
    print(json.dumps({"bytes": b, "lockstep_median_us": l_us, "mpi_median_us": m_us,
                      "lockstep_busbw_gbps": l_bw, "mpi_busbw_gbps": m_bw,
                      "busbw_ratio": l_bw / m_bw}), file=sys.stderr)
PY
