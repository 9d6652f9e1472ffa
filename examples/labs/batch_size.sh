#!/usr/bin/env bash
# Lab: the effect of the batch size. Accuracy after a fixed number of epochs
# and throughput against the per-worker batch, on 1 and 2 workers: two grid
# sweeps of the main job, one trial at a time (so no trial shares the cores
# with another and throughput means something), then one report that
# overlays them. docs/labs.md.
#
#   examples/labs/batch_size.sh RUN_DIR [EPOCHS [TRAIN_SUBSET [BATCHES]]]
#
# Defaults: 2 epochs over the first 20000 training samples, batches
# 16,32,64,128,256,512. Interrupted, it resumes (the sweeps' journals).
set -euo pipefail
dir=${1:?usage: batch_size.sh RUN_DIR [EPOCHS [TRAIN_SUBSET [BATCHES]]]}
epochs=${2:-2}
subset=${3:-20000}
batches=${4:-16,32,64,128,256,512}
bin=${LOCKSTEP_BIN_DIR:-$(dirname "$(command -v lockstep || echo build/bin/lockstep)")}
mkdir -p "$dir"
echo "{\"batch_size\": {\"type\": \"choice\", \"values\": [$batches]}}" > "$dir/space.json"
for np in 1 2; do
  echo "== batch-size lab: $np worker(s)"
  "$bin/lockstep" sweep --space "$dir/space.json" --scheduler grid -np "$np" --concurrent 1 \
    --budget-epochs "$epochs" --dir "$dir/np$np" -- "$bin/lockstep-fashion-mnist" \
    --batch-size '{batch_size}' --epochs '{epochs}' --train-subset "$subset" --run-dir '{dir}'
done
"$bin/lockstep" report "$dir/np1" "$dir/np2" --title "Batch-size lab" -o "$dir/report.html"
