#!/usr/bin/env bash
# A trial program for the sweep tests, following the metrics protocol
# (docs/sweep.md#metrics): one JSON line per epoch appended to METRICS.
#   fake_trial.sh METRICS EPOCHS QUALITY BEHAVIOUR
# score = QUALITY * epoch, so a better QUALITY is better at every rung.
# BEHAVIOUR: ok | crash (exit 3 in epoch 2) | hang (sleeps forever in epoch 1)
# A per-step row ("kind": "step", no metric) precedes each epoch's line, as
# the main job's --log-every writes them: the sweep must skip it.
set -eu
metrics=$1 epochs=$2 quality=$3 behaviour=$4
echo "fake trial: pid $$ quality $quality $behaviour host ${LOCKSTEP_HOST:-none}"
for ((e = 1; e <= epochs; e++)); do
  sleep "${FAKE_EPOCH_SECONDS:-0.3}"
  if [[ $behaviour == crash && $e == 2 ]]; then
    echo "fake trial: crashing on purpose" >&2
    exit 3
  fi
  if [[ $behaviour == hang ]]; then sleep 600; fi
  score=$(awk -v q="$quality" -v e="$e" 'BEGIN { print q * e }')
  echo "{\"kind\": \"step\", \"step\": $e, \"loss\": 1}" >> "$metrics"
  echo "{\"epoch\": $e, \"score\": $score, \"loss\": 1}" >> "$metrics"
done
