#!/usr/bin/env bash
# lockstep's shared-memory allreduce vs Open MPI's MPI_Allreduce: one program
# (lockstep-compare-mpi) under mpirun, the two libraries and a memory-traffic
# bound interleaved within every round at every size, data rewritten before
# every call, medians over rounds (see bench/compare_mpi.cc).
#
#   bench/compare_mpi.sh [-np N] [--sizes 8B:256MiB] [--rounds 3] [--seconds 0.1] [--build build]
set -euo pipefail
np=2 sizes=8B:256MiB rounds=3 build=build seconds=0.1
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
[[ -x $bin/lockstep-compare-mpi ]] || {
  echo "compare_mpi: $bin/lockstep-compare-mpi is missing (needs Open MPI: bash scripts/setup.sh, then build)" >&2
  exit 1
}
root_flag=(); [[ $(id -u) == 0 ]] && root_flag=(--allow-run-as-root)
exec mpirun "${root_flag[@]}" --oversubscribe -np "$np" "$bin/lockstep-compare-mpi" \
  --sizes "$sizes" --rounds "$rounds" --seconds "$seconds"
