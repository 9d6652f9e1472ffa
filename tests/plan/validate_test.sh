#!/usr/bin/env bash
# `lockstep plan validate` end to end on a tiny synthetic model, 2 rounds:
# in each, every point (np 1, np 2) right after an np 1 profile of its own
# (np 2 also after a quick shared-memory fit and a calibration); measure,
# predict, per-round errors. The error is
# reported, not asserted (timing belongs in benchmarks): the test checks that
# every point has a measurement, a prediction and the JSON fields.
set -uo pipefail
BIN=${1:?usage: validate_test.sh BIN_DIR}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$BIN/lockstep" plan validate --np 1,2 --rounds 2 --steps 4 --warmup 2 --quick --json --workdir "$out/w" \
  -- "$BIN/lockstep-plan-synthetic" --model tiny --steps 400 --width 32 --depth 2 >"$out/json" 2>"$out/log"
status=$?
sed 's/^/    | /' "$out/log" | tail -n 30
cat "$out/json"
[[ $status -eq 0 ]] || { echo "FAILED: validate exited $status"; exit 1; }
lines=$(grep -c '"predicted_step_ms"' "$out/json")
[[ $lines -eq 2 ]] || { echo "FAILED: expected 2 points, got $lines"; exit 1; }
for field in np hosts network measured_step_ms predicted_step_ms error_pct compute_slowdown \
  error_min_pct error_max_pct rounds_within_10pct; do
  grep -q "\"$field\"" "$out/json" || { echo "FAILED: no $field"; exit 1; }
done
if grep -q '"measured_step_ms":0[,}]' "$out/json"; then echo "FAILED: zero measurement"; exit 1; fi
# Two rounds: two errors per point, their median is error_pct.
grep -c '"error_rounds_pct":\[[-0-9.e]*,[-0-9.e]*\]' "$out/json" | grep -qx 2 ||
  { echo "FAILED: expected 2 per-round errors per point"; exit 1; }
# The runs interleave: each measurement follows its own np 1 profile.
order=$(grep -o 'round [0-9]/2: [a-z-]*\( for np [0-9]\)\?' "$out/log" | sed 's/ for//' | tr '\n' ',')
want="round 1/2: profile np 1,round 1/2: measure np 1,round 1/2: profile np 2,round 1/2: fit-shm np 2,"
want+="round 1/2: calibrate np 2,round 1/2: measure np 2,round 2/2: profile np 1,round 2/2: measure np 1,"
want+="round 2/2: profile np 2,round 2/2: fit-shm np 2,round 2/2: calibrate np 2,round 2/2: measure np 2,"
[[ $order == "$want" ]] || { echo "FAILED: run order $order"; exit 1; }
# np 1 points are predicted without a network: no common shared-memory fit
# beside the np 2 point's own fits (it used to run before round 1).
[[ ! -e "$out/w/net-shm.json" ]] || { echo "FAILED: a common shm fit ran beside np 2's own"; exit 1; }
# Shared memory is fitted on cold buffers by default (docs/plan.md).
grep -q -- '--buffers cold' "$out/w/net-shm-np2-r0.json" || { echo "FAILED: shm fit not cold"; exit 1; }
# Bad fit options are refused by name.
for bad in "--buffers warm" "--statistic mode" "--busy-threads -1"; do
  # shellcheck disable=SC2086
  "$BIN/lockstep" bench fit --backend shm --out "$out/x.json" $bad 2>"$out/err"
  rc=$?
  [[ $rc -eq 2 ]] && grep -q -- "${bad%% *}" "$out/err" ||
    { echo "FAILED: bench fit $bad: exit $rc: $(cat "$out/err")"; exit 1; }
done
echo "ok: plan validate reported both points"
