#!/usr/bin/env bash
# The main job's checkpoint pause by --checkpoint-format (file: rank 0 writes
# checkpoint.pt; sharded: every rank writes its share of step-<N>/; async:
# sharded, written in the background), side by side: each round runs
# lockstep-fashion-mnist under `lockstep run -np NP` once per format, the
# formats in a rotated order, every run saving at each of its --epochs
# epoch ends, and collects rank 0's "checkpoint ...: training paused X ms"
# lines (examples/fashion_mnist/checkpoints.h: the time save() held the
# training thread). Prints the median pause per format over every save of
# every round, the ratios sharded/file and async/sharded, and one JSON line
# per format and per ratio. The model is the default recipe's FashionCnn
# (32/64 channels) with Adam, as the job trains it.
#
#   bench/checkpoint_main_job.sh [--np 2] [--rounds 3] [--epochs 6] [--build build]
#                                [--job-args "ARGS"]   (default: a 2048-sample subset)
set -euo pipefail
np=2 rounds=3 epochs=6 build=build
job_args="--train-subset 2048 --test-subset 256 --eval-every 1"
while (($#)); do
  case $1 in
    --np) np=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --job-args) job_args=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "checkpoint_main_job: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-ckpt-main-job.XXXXXX")
trap 'rm -rf "$work"' EXIT
formats=(file sharded async)
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < ${#formats[@]}; k++)); do
    f=${formats[$(((k + r) % ${#formats[@]}))]}
    rm -rf "$work/ckpt-$f"
    # shellcheck disable=SC2086  # job_args is a list of flags
    "$build/bin/lockstep" run -np "$np" "$build/bin/lockstep-fashion-mnist" $job_args \
      --epochs "$epochs" --checkpoint-dir "$work/ckpt-$f" --checkpoint-format "$f" \
      >"$work/out-$f-$r" 2>"$work/err-$f-$r" || {
      echo "checkpoint_main_job: the $f run of round $r failed:" >&2
      tail -n 20 "$work/err-$f-$r" >&2
      exit 1
    }
    grep -o "training paused [0-9.]* ms" "$work/err-$f-$r" | awk '{print $3}' >>"$work/pauses-$f"
  done
done
python3 - "$work" "$np" "$rounds" "$epochs" <<'PY'
import json, statistics, sys
work, np, rounds, epochs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
pauses = {f: [float(x) for x in open(f"{work}/pauses-{f}")] for f in ("file", "sharded", "async")}
print(f"main job checkpoint pauses, np {np}, {rounds} rounds x {epochs} saves, medians (ms):")
for f, v in pauses.items():
    print(f"  {f:<8} {statistics.median(v):9.2f}   ({len(v)} saves; min {min(v):.2f}, max {max(v):.2f})")
    print(json.dumps({"bench": "checkpoint_main_job", "format": f, "np": np, "saves": len(v),
                      "median_ms": statistics.median(v), "pauses_ms": v}))
for a, b in (("sharded", "file"), ("async", "sharded"), ("async", "file")):
    ratio = statistics.median(pauses[a]) / statistics.median(pauses[b])
    print(f"  {a} / {b}: {ratio:.3f}x")
    print(json.dumps({"bench": "checkpoint_main_job", "ratio": f"{a} / {b}", "np": np, "value": ratio}))
PY
