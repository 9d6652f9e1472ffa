#!/usr/bin/env bash
# Time to accuracy of the main job over a slow link, compressed against
# uncompressed allreduce: 2 workers on 2 network-namespace "hosts" whose
# links are shaped by tc tbf (default 200 Mbit/s), flat Gloo between them.
# Runs are interleaved (seed 1: none, powersgd:4, onebit-adam, onebit; seed
# 2: ...) so every scheme sees the same machine. Each run stops at the
# first evaluation with test accuracy >= --target (the main job's
# --target-accuracy) and appends one JSON line to --results; the report is a
# table per run, the mean per scheme over the seeds, and the ratio of each
# scheme's time to target over uncompressed allreduce's, then JSON lines.
#
#   sudo bench/compression_link.sh [--seeds 1,2] [--rate 200mbit] [--target 0.9]
#        [--schemes none,powersgd:4,onebit-adam,onebit] [--warmup 100] [--build build]
#        [--eval-every F] [--results FILE] [--report-only] [--lockstep-args "ARGS"]
#
# Needs root, iproute2 and tc with the tbf qdisc; exits 77 without them.
# --warmup: the main job's --compression-warmup (uncompressed steps first).
# --eval-every: the main job's, a fraction of an epoch (its default with a
# target: 0.25); evaluation time is not training time, so a finer F only
# costs wall time. A scheme SCHEME@OPT runs with --optimizer OPT (the main
# job's default is adam); onebit-lamb alone means onebit-lamb@lamb, and its
# uncompressed reference is none@lamb.
set -euo pipefail
seeds=1,2 rate=200mbit target=0.9 schemes=none,powersgd:4,onebit-adam,onebit warmup=100
build=build results=bench-results/compression_link.jsonl report_only=0 extra="" eval_every=""
while (($#)); do
  case $1 in
    --seeds) seeds=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --schemes) schemes=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --eval-every) eval_every=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --report-only) report_only=1; shift ;;
    --lockstep-args) extra=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "compression_link: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $seeds =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "compression_link: --seeds wants N,N,... ($seeds)" >&2; exit 2; }
python=/usr/bin/python3
mkdir -p "$(dirname "$results")"

report() {
  "$python" - "$results" "$target" <<'EOF'
import json, sys
path, target = sys.argv[1], float(sys.argv[2])
runs = [json.loads(l) for l in open(path) if l.strip()]
runs = [r for r in runs if abs(r["target_accuracy"] - target) < 1e-9]
if not runs:
    sys.exit(f"compression_link: no runs for target {target} in {path}")
print(f"time to {100 * target:g}% test accuracy over a {runs[-1]['rate']} link, 2 workers on 2 hosts")
print(f"{'scheme':<12} {'seed':>4} {'train s':>9} {'wall s':>9} {'epochs':>7}")
by = {}
for r in runs:
    by.setdefault(r["scheme"], []).append(r)
    t = r["time_to_target_s"]
    if t is None:
        print(f"{r['scheme']:<12} {r['seed']:>4} {'missed':>9}")
    else:
        print(f"{r['scheme']:<12} {r['seed']:>4} {t:9.2f} {r['wall_to_target_s']:9.2f} {r['epochs_to_target']:7.2f}")
def mean(xs):
    return None if not xs or any(x is None for x in xs) else sum(xs) / len(xs)
summary = {}
for s, rs in by.items():
    summary[s] = {"scheme": s, "runs": len(rs), "misses": sum(r["time_to_target_s"] is None for r in rs),
                  "time_to_target_s": mean([r["time_to_target_s"] for r in rs]),
                  "wall_to_target_s": mean([r["wall_to_target_s"] for r in rs]),
                  "epochs_to_target": mean([r["epochs_to_target"] for r in rs]),
                  "target_accuracy": target, "rate": runs[-1]["rate"]}
print()
def base_of(s):  # the uncompressed run with the same optimizer
    opt = s.split("@")[1] if "@" in s else ("lamb" if s == "onebit-lamb" else "adam")
    ref = "none" if opt == "adam" else f"none@{opt}"
    return summary.get(ref, {}).get("time_to_target_s")
for s, v in summary.items():
    if v["time_to_target_s"] is None:
        print(f"{s:<12} mean: missed in {v['misses']} of {v['runs']} runs")
        continue
    base = base_of(s)
    ratio = f", {v['time_to_target_s'] / base:.3f}x uncompressed's training time" if base else ""
    print(f"{s:<12} mean of {v['runs']}: {v['time_to_target_s']:.2f} s training, "
          f"{v['wall_to_target_s']:.2f} s wall, {v['epochs_to_target']:.2f} epochs{ratio}")
    if base:
        v["ratio_to_none"] = v["time_to_target_s"] / base
for v in summary.values():
    print(json.dumps(v))
EOF
}

if ((report_only)); then report; exit 0; fi
skip() { echo "SKIPPED: $*" >&2; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root (ip netns add, tc)"
{ command -v ip && command -v tc; } >/dev/null || skip "needs iproute2 (ip, tc)"
bin=$(cd "$build/bin" 2>/dev/null && pwd) || { echo "compression_link: no $build/bin; build first" >&2; exit 1; }

id=$$
NS1=lcA$id NS2=lcB$id BR=lcbr$id
NET=10.$(( (id >> 8) % 200 + 20 )).$(( id % 250 + 1 ))
cleanup() {
  for ns in $NS1 $NS2; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null
  done
  ip link del "$BR" 2>/dev/null
  rm -rf "${tmp:-}"
}
trap cleanup EXIT
ip netns add "$NS1" 2>/dev/null || skip "this machine does not permit network namespaces"
ip link add "$BR" type bridge
ip addr add "$NET.1/24" dev "$BR" && ip link set "$BR" up
i=10
for ns in $NS1 $NS2; do
  [[ $ns == "$NS1" ]] || ip netns add "$ns"
  ip link add "v$i$id" type veth peer name eth0 netns "$ns"
  ip link set "v$i$id" master "$BR" up
  ip -n "$ns" addr add "$NET.$i/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # The rate on every host's egress; a 32 KiB bucket sustains it with the
  # kernel's timer granularity (as `lockstep plan validate --shape` does).
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 32kb latency 100ms ||
    skip "tc tbf is not available"
  i=$((i + 1))
done

tmp=$(mktemp -d)
export MALLOC_TRIM_THRESHOLD_=${MALLOC_TRIM_THRESHOLD_:-1073741824}
export MALLOC_MMAP_THRESHOLD_=${MALLOC_MMAP_THRESHOLD_:-1073741824}
IFS=, read -ra seed_list <<<"$seeds"
IFS=, read -ra scheme_list <<<"$schemes"
for seed in "${seed_list[@]}"; do
  for scheme in "${scheme_list[@]}"; do
    echo "compression_link: $scheme seed $seed ($(date +%T))" >&2
    metrics=$tmp/$seed.${scheme//[:@]/_}.jsonl
    compression=${scheme%@*} optimizer=adam
    [[ $scheme == *@* ]] && optimizer=${scheme#*@}
    [[ $scheme == onebit-lamb ]] && optimizer=lamb
    job_args=(--optimizer "$optimizer")
    [[ -n $eval_every ]] && job_args+=(--eval-every "$eval_every")
    # shellcheck disable=SC2086  # the extra arguments are meant to split
    if ! timeout 1200 "$bin/lockstep" run --remote-exec 'ip netns exec {host}' \
        --rendezvous-addr "$NET.1" -H "$NS1:1,$NS2:1" --backend gloo -- \
        "$bin/lockstep-fashion-mnist" --seed "$seed" --target-accuracy "$target" \
        --metrics "$metrics" --compression "$compression" --compression-warmup "$warmup" \
        "${job_args[@]}" $extra >"$tmp/out" 2>&1; then
      tail -5 "$tmp/out" >&2
      echo "compression_link: $scheme seed $seed failed" >&2
      exit 1
    fi
    grep -h "time to target" "$tmp/out" | sed 's/^\[0\]: //; s/^/  /' >&2
    tail -n 1 "$metrics" | "$python" -c '
import json, sys
line = json.loads(sys.stdin.read())
line.update(scheme=sys.argv[1], seed=int(sys.argv[2]), target_accuracy=float(sys.argv[3]),
            rate=sys.argv[4], warmup=int(sys.argv[5]), args=sys.argv[6])
print(json.dumps(line))' "$scheme" "$seed" "$target" "$rate" "$warmup" "${job_args[*]} $extra" >>"$results"
  done
done
report
