#!/usr/bin/env bash
# The GPU checks of docs/gpu.md in one go, on a GPU node set up as
# scripts/setup-gpu.sh describes: builds the GPU configuration, then runs
#  1. the CUDA tests (NCCL collective matrix at world size 1, CUDA tensors
#     through the torch layer on both paths, mixed precision);
#  2. lockstep bench allreduce --device cuda at np 1 (NCCL) and np 2
#     (two workers sharing the GPU, staged through shared memory);
#  3. lockstep bench train --device cuda: lockstep at np 1 against plain
#     LibTorch, the same model and step, interleaved;
#  4. the main job on one GPU (np 1) and two workers sharing it (np 2);
#  5. the step anatomy at np 1 and 2 (bench/step_anatomy.py over a short
#     run's metrics and timeline: compute, exposed waits, and the GPU times
#     of the fusion copies and collectives).
# Every step is time-boxed and logged to $OUT (default: gpu-check-out/);
# a failed step does not stop the others. The summary is printed last.
#
#   bash scripts/gpu-check.sh [BUILD_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
summary=()
step() {  # step NAME SECONDS CMD...
  local name=$1 limit=$2 start=$SECONDS status=0
  shift 2
  echo "== $name"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1 || status=$?
  summary+=("$(printf '%5d s  %-28s %s' $((SECONDS - start)) "$name" \
    "$( ((status)) && echo "FAILED ($status)" || echo ok)")")
  tail -n "${TAIL:-15}" "$OUT/$name.log"
}

DATA=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
bin=$BUILD/bin
export LOCKSTEP_LOG_LEVEL=${LOCKSTEP_LOG_LEVEL:-warning}

step tests-gpu 150 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 140
step main-np1 150 "$bin/lockstep" run -np 1 "$bin/lockstep-fashion-mnist" --device cuda \
  --data "$DATA" --metrics "$OUT/main-np1.jsonl"
step bench-train 150 "$bin/lockstep-bench-train" --device cuda --cpus 1 --layouts 1x1 \
  --batch-size 256 --warmup-steps 50 --window-steps 200 --windows 3 --rounds 3 \
  --json "$OUT/bench-train.jsonl"
step main-np2 180 "$bin/lockstep" run -np 2 "$bin/lockstep-fashion-mnist" --device cuda \
  --data "$DATA" --metrics "$OUT/main-np2.jsonl"
for np_backend in 1:nccl 2:shm; do
  step "bench-allreduce-np${np_backend%%:*}-${np_backend#*:}" 45 "$bin/lockstep" run \
    -np "${np_backend%%:*}" "$bin/lockstep" bench allreduce --device cuda \
    --backend "${np_backend#*:}" --sizes 4KiB:64MiB --factor 4 --seconds 0.1 --check
done
step bench-allreduce-np2-shm-host 45 "$bin/lockstep" run -np 2 "$bin/lockstep" bench allreduce \
  --device cpu --backend shm --sizes 4KiB:64MiB --factor 4 --seconds 0.1

for np in 1 2; do
  step "anatomy-np$np" 120 bash -c "\"$bin/lockstep\" run -np $np \"$bin/lockstep-fashion-mnist\" \
    --device cuda --data \"$DATA\" --max-steps 400 --log-every 1 --run-dir \"$OUT/anatomy-np$np\" \
    && python3 bench/step_anatomy.py \"$OUT/anatomy-np$np\" --skip-steps 50"
done

echo "== summary"
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
