#!/usr/bin/env bash
# Time to accuracy of lockstep's main job against the PyTorch DDP peer
# (bench/peer/ddp_fashion_mnist.py), measured the MLPerf way: several seeds,
# drop the fastest and the slowest run, mean of the rest; a run that misses
# the target counts as the slowest, and more than one miss fails the job.
# Runs are interleaved (seed 1 lockstep, seed 1 peer, seed 2 lockstep...)
# so all jobs see the same machine. Jobs: lockstep (the main job, --np
# workers), peer (PyTorch DDP, --np processes x 1 thread), torch1 (the same
# PyTorch script as 1 process x --np threads).
#
#   bench/time_to_accuracy.sh [--seeds 1,2,3,4,5] [--target 0.9] [--jobs lockstep,peer,torch1]
#                             [--np 2] [--results FILE] [--report-only] [--build build]
#                             [--lockstep-args "ARGS"] [--peer-args "ARGS"]
#
# Each run appends one JSON line to --results (default
# bench-results/time_to_accuracy.jsonl), so a long study can be split into
# several calls (e.g. --seeds 1,2 then --seeds 3,4,5) and reported once with
# --report-only. The report is a table of every run, the aggregate per job
# and the ratio lockstep / peer, then JSON lines. Both jobs get
# MALLOC_TRIM_THRESHOLD_ and MALLOC_MMAP_THRESHOLD_ raised (glibc heap
# trimming costs LibTorch a third of a small step) and 1 intra-op thread per
# worker, each worker on its own core.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
seeds=1,2,3,4,5 target=0.9 jobs=lockstep,peer np=2 build=build report_only=0
results=bench-results/time_to_accuracy.jsonl lockstep_args="" peer_args=""
while (($#)); do
  case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --report-only) report_only=1; shift ;;
    --build) build=$2; shift 2 ;;
    --lockstep-args) lockstep_args=$2; shift 2 ;;
    --peer-args) peer_args=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "time_to_accuracy: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $seeds =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "time_to_accuracy: --seeds wants N,N,... ($seeds)" >&2; exit 2; }
[[ $np =~ ^[1-9][0-9]*$ ]] || { echo "time_to_accuracy: --np wants a positive integer ($np)" >&2; exit 2; }
mkdir -p "$(dirname "$results")"
export MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-1073741824}
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-1073741824}
python=/usr/bin/python3  # Debian's, which has python3-torch

run_lockstep() {  # seed metrics-file
  local bin
  bin=$(cd "$build/bin" 2>/dev/null && pwd) || { echo "time_to_accuracy: no $build/bin; build first" >&2; return 1; }
  # shellcheck disable=SC2086  # the extra arguments are meant to split
  "$bin/lockstep" run -np "$np" -- "$bin/lockstep-fashion-mnist" --seed "$1" \
    --target-accuracy "$target" --metrics "$2" $lockstep_args
}

run_peer() {  # seed metrics-file
  # shellcheck disable=SC2086
  "$python" "$here/peer/ddp_fashion_mnist.py" --world "$np" --seed "$1" \
    --target-accuracy "$target" --metrics "$2" $peer_args
}

run_torch1() {  # seed metrics-file
  # shellcheck disable=SC2086
  "$python" "$here/peer/ddp_fashion_mnist.py" --world 1 --threads "$np" --seed "$1" \
    --target-accuracy "$target" --metrics "$2" $peer_args
}

if ((!report_only)); then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  IFS=, read -ra seed_list <<<"$seeds"
  IFS=, read -ra job_list <<<"$jobs"
  for seed in "${seed_list[@]}"; do
    for job in "${job_list[@]}"; do
      [[ $job == lockstep || $job == peer || $job == torch1 ]] ||
        { echo "time_to_accuracy: unknown job $job (lockstep, peer, torch1)" >&2; exit 2; }
      echo "time_to_accuracy: $job seed $seed ($(date +%T))" >&2
      metrics=$tmp/$job.$seed.jsonl
      if ! "run_$job" "$seed" "$metrics" >"$tmp/out" 2>"$tmp/err"; then
        tail -5 "$tmp/err" >&2
        echo "time_to_accuracy: $job seed $seed failed" >&2
        exit 1
      fi
      grep -h "time to target" "$tmp/out" | sed 's/^\[0\]: //; s/^/  /' >&2
      # The last metrics line is the time-to-target summary.
      tail -n 1 "$metrics" | "$python" -c '
import json, sys
line = json.loads(sys.stdin.read())
line.update(job=sys.argv[1], seed=int(sys.argv[2]), target_accuracy=float(sys.argv[3]), args=sys.argv[4])
print(json.dumps(line))' "$job" "$seed" "$target" "$([[ $job == lockstep ]] && echo "$lockstep_args" || echo "$peer_args")" >>"$results"
    done
  done
fi
"$python" "$here/peer/mlperf_report.py" "$results" --target "$target"
