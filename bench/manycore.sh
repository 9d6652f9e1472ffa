#!/usr/bin/env bash
# Many ranks on one host (issue 28): the shm allreduce of today's decision
# (LOCKSTEP_SHM_ALGORITHM=auto) against the rule before it (legacy), side by
# side, per rank count, interleaved, plus three ablations at 8+ ranks
# (linear waits instead of dissemination; 64 KiB and 1 MiB chunks instead of
# the cache-sized default: 512 KiB at 8 ranks, 256 KiB at 16), and
# a memory-traffic bound at 2 ranks; at 8+ ranks also flat (LOCKSTEP_SHM_NODES
# =off) against two_level (forced, in --nodes groups; docs/shm.md "Two-level
# allreduce"): on a one-node host only the price of its extra steps, on a
# multi-socket host with ranks bound per socket what it saves. Prints one
# compact table per rank count and the issue's goals with pass/fail. Needs
# only the build and python3 (no MPI); about 90-120 s on a 16-core host.
# --train R adds `lockstep bench train --rounds R` (every workers x threads
# layout of the host, measured beside the planner's prediction and
# recommendation; about 3-4 min at R = 2 on 16 cores); --no-allreduce skips
# the allreduce part; --train-args passes more options to bench train.
#
#   bench/manycore.sh BUILD_DIR [--nps "2 4 8 16"] [--sizes 4KiB:256MiB]
#                     [--seconds 0.15] [--rounds 1] [--out DIR]
#                     [--train R] [--train-args "ARGS"] [--no-allreduce] [--nodes 2]
#
# Every run is `lockstep run -np N lockstep bench allreduce --json`; the raw
# JSON lines stay in --out (default: a temporary directory, printed).
set -euo pipefail
build=${1:-}
[[ -n $build && $build != -* ]] || { sed -n '2,21p' "$0"; exit 2; }
shift
nps="2 4 8 16" sizes=4KiB:256MiB seconds=0.15 rounds=1 out="" train=0 train_args="" allreduce=1
nodes=2
while (($#)); do
  case $1 in
    --nps) nps=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --train) train=$2; shift 2 ;;
    --train-args) train_args=$2; shift 2 ;;
    --no-allreduce) allreduce=0; shift ;;
    --nodes) nodes=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
    *) echo "manycore: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
bin=$(cd "$build/bin" && pwd)/lockstep
[[ -x $bin ]] || { echo "manycore: $bin is missing: build the lockstep target first" >&2; exit 1; }
out=${out:-$(mktemp -d -t lockstep-manycore.XXXXXX)}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
echo "# host: $(nproc) CPUs; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "# raw results: $out"

if ((train > 0)); then
  # FashionCnn's step in every layout N x T = CPUs, plain LibTorch, the
  # independent-process ceiling and lockstep, with the planner's prediction.
  # shellcheck disable=SC2086
  "$bin" bench train --rounds "$train" $train_args --json "$out/train.jsonl" 2>"$out/train.err" ||
    { echo "manycore: bench train failed:" >&2; tail -5 "$out/train.err" >&2; exit 1; }
fi
((allreduce)) || exit 0

# variant name -> environment
declare -A env_of=(
  [legacy]="LOCKSTEP_SHM_ALGORITHM=legacy"
  [new]="LOCKSTEP_SHM_ALGORITHM=auto"
  [linear]="LOCKSTEP_SHM_ALGORITHM=auto LOCKSTEP_SHM_SYNC=linear"
  [chunk64K]="LOCKSTEP_SHM_ALGORITHM=auto LOCKSTEP_SHM_CHUNK_BYTES=64KiB"
  [chunk1M]="LOCKSTEP_SHM_ALGORITHM=auto LOCKSTEP_SHM_SLOT_BYTES=2MiB LOCKSTEP_SHM_CHUNK_BYTES=1MiB"
  [flat]="LOCKSTEP_SHM_ALGORITHM=auto LOCKSTEP_SHM_NODES=off"
  [two_level]="LOCKSTEP_SHM_ALGORITHM=two_level LOCKSTEP_SHM_NODES=$nodes"
)
start=$SECONDS
for ((round = 1; round <= rounds; ++round)); do
  for np in $nps; do
    variants="legacy new"
    ((np >= 8)) && variants="legacy new linear chunk64K chunk1M flat two_level"
    for v in $variants; do
      # shellcheck disable=SC2086
      env ${env_of[$v]} "$bin" run -np "$np" "$bin" bench allreduce --sizes "$sizes" --factor 4 \
        --seconds "$seconds" --json 2>"$out/np$np-$v-r$round.err" |
        sed -n 's/^\[0\]: //p' >"$out/np$np-$v-r$round.jsonl" ||
        { echo "manycore: np $np $v failed:" >&2; tail -5 "$out/np$np-$v-r$round.err" >&2; exit 1; }
    done
  done
done
echo "# benchmarks took $((SECONDS - start)) s"

# The memory-traffic bound at 2 ranks for the sizes >= 64 MiB (optional:
# needs a C++20 compiler).
if cxx=$(command -v c++ || command -v g++); then
  if "$cxx" -O2 -std=c++20 -pthread "$here/manycore_bound.cc" -o "$out/manycore_bound" 2>"$out/bound.err"; then
    "$out/manycore_bound" 2 $((64 << 20)) $((256 << 20)) >"$out/bound.jsonl"
  fi
fi

python3 - "$out" "$nps" <<'EOF'
import json, os, statistics, sys
out, nps = sys.argv[1], [int(x) for x in sys.argv[2].split()]

def load(np, v):
    rows = {}
    for f in sorted(os.listdir(out)):
        if f.startswith(f"np{np}-{v}-r") and f.endswith(".jsonl"):
            for line in open(os.path.join(out, f)):
                j = json.loads(line)
                rows.setdefault(j["bytes"], []).append(j)
    # median over rounds
    return {b: {"us": statistics.median(r["median_us"] for r in rs),
                "busbw": statistics.median(r["busbw_gbps"] for r in rs),
                "algo": rs[0].get("algorithm", "?")} for b, rs in rows.items()}

def human(b):
    for unit, s in (("MiB", 20), ("KiB", 10)):
        if b >= 1 << s: return f"{b >> s}{unit}"
    return f"{b}B"

res = {}
for np in nps:
    res[np] = {v: load(np, v) for v in ("legacy", "new", "linear", "chunk64K", "chunk1M", "flat",
                                        "two_level")}
    L, N = res[np]["legacy"], res[np]["new"]
    extra = [v for v in ("linear", "chunk64K", "chunk1M", "flat", "two_level") if res[np][v]]
    print(f"\n## np {np}   (us = median latency; bw = busbw GB/s; x = new speed / legacy)")
    head = f"{'size':>7} {'legacy us':>10} {'new us':>9} {'x':>5} {'legacy bw':>9} {'new bw':>7}  {'new algorithm':<30}"
    for v in extra: head += f" {v + ' us':>11}"
    print(head)
    for b in sorted(N):
        l, n = L.get(b), N[b]
        line = f"{human(b):>7} {l['us'] if l else float('nan'):>10.1f} {n['us']:>9.1f} "
        line += f"{(l['us'] / n['us']) if l else float('nan'):>5.2f} {l['busbw'] if l else float('nan'):>9.2f} {n['busbw']:>7.2f}  {n['algo']:<30}"
        for v in extra:
            e = res[np][v].get(b)
            line += f" {e['us'] if e else float('nan'):>11.1f}"
        print(line)

print("\n## goals (issue 28)")
def verdict(ok): return "PASS" if ok else "FAIL"
k4 = 4096
if 2 in res and 16 in res and k4 in res[2]["new"] and k4 in res[16]["new"]:
    r = res[16]["new"][k4]["us"] / res[2]["new"][k4]["us"]
    print(f"4KiB latency np16 / np2 = {r:.2f} (goal <= 3): {verdict(r <= 3)}")
for np in nps:
    N = res[np]["new"]
    sz = sorted(N)
    bad = [f"{human(a)} {N[a]['us']:.1f}us > {human(b)} {N[b]['us']:.1f}us"
           for a, b in zip(sz, sz[1:]) if N[a]["us"] > N[b]["us"]]
    print(f"np {np}: no size slower than a larger one: {verdict(not bad)} {'; '.join(bad)}")
for np in (8, 16):
    if np not in res: continue
    L, N = res[np]["legacy"], res[np]["new"]
    for b in (256 << 10, 1 << 20, 4 << 20):
        if b in L and b in N:
            r = N[b]["busbw"] / L[b]["busbw"]
            print(f"np {np} {human(b)}: busbw new/legacy = {r:.2f} (goal >= 2): {verdict(r >= 2)}")
bound = os.path.join(out, "bound.jsonl")
if os.path.exists(bound) and 2 in res:
    for line in open(bound):
        j = json.loads(line)
        n = res[2]["new"].get(j["bytes"])
        if n:
            bw = j["bytes"] / (j["copy_us"] * 1e3)  # bus factor 1 at 2 ranks
            share = n["busbw"] / bw
            print(f"np 2 {human(j['bytes'])}: busbw {n['busbw']:.2f} of bound {bw:.2f} GB/s = "
                  f"{100 * share:.0f}% (goal >= 70%): {verdict(share >= 0.7)}")
else:
    print("np 2 memory-traffic bound: not measured (no C++ compiler?)")
EOF
