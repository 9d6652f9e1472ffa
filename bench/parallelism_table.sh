#!/usr/bin/env bash
# The strategy table of docs/parallelism.md: lockstep-parallelism under every
# strategy on the same model, interleaved over ROUNDS rounds (best round
# kept), each run `lockstep run -np N ... --max-steps STEPS --json`.
# Prints a human table (samples/s and its ratio to data parallelism, memory
# per rank, bytes sent per step measured and closed form, pipeline bubble
# measured and (p-1)/(m+p-1)) and, with --json FILE, every run's JSON line.
#
#   bench/parallelism_table.sh [-np 2] [--rounds 2] [--steps 60] [--micro-batches 4]
#       [--variants "data tensor pipeline:gpipe pipeline:1f1b zero:1 zero:2 ps ps:dedicated"]
#   a variant is STRATEGY[:DETAIL][+overlap][@MESH], e.g. tensor@data=2,tensor=2;
#   +overlap runs it under `lockstep run --overlap on` (zero: the parameter
#   all-gather left in flight for the next forward), e.g. zero:2+overlap
#       [--json FILE] [--build build]
#
# Run it under /work/bin/quiet (or on an otherwise idle machine): only the
# ratios of one run mean anything.
set -euo pipefail
np=2 rounds=2 steps=60 micro=4 build=build json=""
variants="data tensor pipeline:gpipe pipeline:1f1b zero:1 zero:2 ps ps:dedicated"
while (($#)); do
  case $1 in
    -np) np=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --micro-batches) micro=$2; shift 2 ;;
    --variants) variants=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "parallelism_table: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
bin=$(cd "$build/bin" && pwd)
for b in lockstep lockstep-parallelism; do
  [[ -x $bin/$b ]] || { echo "parallelism_table: build $build/bin/$b first" >&2; exit 1; }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
subset=$((steps * 64 * np + 64 * np))

for ((round = 1; round <= rounds; round++)); do
  for v in $variants; do
    spec=${v%%@*} mesh=${v#*@} launcher=() extra=()
    [[ $mesh == "$v" ]] && mesh=""
    if [[ $spec == *+overlap ]]; then spec=${spec%+overlap} launcher+=(--overlap on); fi
    strategy=${spec%%:*} detail=${spec#*:}
    [[ $detail == "$spec" ]] && detail=""
    [[ -n $mesh ]] && extra+=(--mesh "$mesh")
    case $strategy:$detail in
      pipeline:*) extra+=(--schedule "${detail:-1f1b}" --micro-batches "$micro") ;;
      zero:*) extra+=(--zero-stage "${detail:-2}") ;;
      ps:dedicated) launcher=(--servers 1) ;;
    esac
    echo "round $round/$rounds: $v" >&2
    if ! "$bin/lockstep" run -np "$np" "${launcher[@]}" -- "$bin/lockstep-parallelism" \
        --strategy "$strategy" "${extra[@]}" --max-steps "$steps" --train-subset "$subset" \
        --test-subset 1000 --json >"$out/run.txt" 2>"$out/err.txt"; then
      echo "parallelism_table: $v failed:" >&2; tail -5 "$out/err.txt" >&2; exit 1
    fi
    grep -o '{.*}' "$out/run.txt" | tail -1 |
      python3 -c 'import json,sys; d=json.load(sys.stdin); d["variant"]=sys.argv[1]; d["round"]=int(sys.argv[2]); print(json.dumps(d))' \
        "$v" "$round" >>"$out/all.jsonl"
  done
done
[[ -n $json ]] && cp "$out/all.jsonl" "$json"
python3 - "$out/all.jsonl" "$np" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
best = {}
for r in runs:
    v = r["variant"]
    if v not in best or r["samples_per_s"] > best[v]["samples_per_s"]:
        best[v] = r
base = best.get("data", {}).get("samples_per_s")
print(f"lockstep-parallelism, {sys.argv[2]} ranks, best of {max(r['round'] for r in runs)} round(s)")
print(f"{'variant':<14}{'samples/s':>10}{'vs data':>8}{'params MB':>10}{'opt MB':>8}{'act MB':>8}"
      f"{'KB/step':>9}{'closed':>9}{'meas/cf':>8}{'bubble':>8}{'theory':>8}")
for v, r in best.items():
    cf = r["bytes_sent_per_step_closed_form"]
    ratio = r["bytes_sent_per_step"] / cf if cf else float("nan")
    bubble = f"{r['bubble_measured']:.2f}" if "bubble_measured" in r else "-"
    theory = f"{r['bubble_theory']:.2f}" if "bubble_theory" in r else "-"
    vs = f"{r['samples_per_s'] / base:.2f}" if base else "-"
    print(f"{v:<14}{r['samples_per_s']:>10.0f}{vs:>8}{r['param_bytes_per_rank'] / 1e6:>10.2f}"
          f"{r['optimizer_state_bytes_per_rank'] / 1e6:>8.2f}{r['activation_bytes_per_rank'] / 1e6:>8.2f}"
          f"{r['bytes_sent_per_step'] / 1e3:>9.1f}{cf / 1e3:>9.1f}{ratio:>8.2f}{bubble:>8}{theory:>8}")
PY
