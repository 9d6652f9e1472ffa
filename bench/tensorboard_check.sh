#!/usr/bin/env bash
# TensorBoard reads what lockstep writes: a 2-worker main job with per-step
# and per-rank telemetry, and a 6-trial ASHA sweep, each then read by
# TensorBoard's own EventAccumulator (bench/tensorboard_check.py) side by
# side with metrics.jsonl and the sweep's journal; the sweep also through
# the HParams plugin's HTTP API (--serve). Not part of CI: needs python3 with
# the `tensorboard` package. About a minute on 16 cores.
#
#   bench/tensorboard_check.sh BUILD_DIR [OUT_DIR] [main-job flags...]
#   e.g. bench/tensorboard_check.sh build /tmp/tb --device cpu
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(cd "$1" && pwd)/bin
out=${2:-$(mktemp -d)}
shift $(($# < 2 ? $# : 2))
python=${PYTHON:-python3}
"$python" -c 'import tensorboard' || { echo "needs the tensorboard Python package" >&2; exit 2; }
rm -rf "$out/train" "$out/sweep"
mkdir -p "$out"
"$bin/lockstep" run -np 2 "$bin/lockstep-fashion-mnist" --epochs 2 --train-subset 6000 \
  --test-subset 1000 --log-every 5 --log-ranks --run-dir "$out/train" "$@" 2>"$out/train.log"
cat >"$out/space.json" <<'JSON'
{"lr": {"type": "loguniform", "low": 1e-4, "high": 3e-2},
 "batch_size": {"type": "choice", "values": [32, 64, 128]}}
JSON
"$bin/lockstep" sweep --dir "$out/sweep" --space "$out/space.json" --trials 6 --scheduler asha \
  --budget-epochs 3 --eta 2 -np 1 -- "$bin/lockstep-fashion-mnist" --lr {lr} \
  --batch-size {batch_size} --epochs {epochs} --train-subset 3000 --test-subset 500 \
  --log-every 5 --run-dir {dir} "$@" 2>"$out/sweep.log"
status=0
"$python" "$here/tensorboard_check.py" train "$out/train" || status=1
"$python" "$here/tensorboard_check.py" sweep "$out/sweep" --serve || status=1
echo "runs in $out (tensorboard --logdir $out)"
exit $status
