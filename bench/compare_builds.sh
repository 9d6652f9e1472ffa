#!/usr/bin/env bash
# Two builds of lockstep side by side: `lockstep bench <collective>` from the
# base build and from the new one, interleaved round by round on the same
# sizes (the machine is shared and noisy; only ratios measured this way mean
# anything). Prints per size the median latency of each side and new/base.
#
#   bench/compare_builds.sh --base DIR --new DIR [-np N] [--collective allreduce]
#       [--sizes 8B:256MiB] [--rounds 3] [--seconds 0.2] [--backend auto]
#
# DIR is a build folder holding bin/lockstep (a copy of an older build's bin/
# works: the binaries link lockstep statically).
set -euo pipefail
base="" new="" np=2 collective=allreduce sizes=8B:256MiB rounds=3 seconds=0.2 backend=auto
while (($#)); do
  case $1 in
    --base) base=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    -np) np=$2; shift 2 ;;
    --collective) collective=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "compare_builds: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
for side in "$base" "$new"; do
  [[ -n $side && -x $side/bin/lockstep ]] || {
    echo "compare_builds: --base and --new must name build folders with bin/lockstep" >&2
    exit 2
  }
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for side in base new; do
    dir=$base; [[ $side == new ]] && dir=$new
    echo "round $r/$rounds: $side ($dir)" >&2
    "$dir/bin/lockstep" run -np "$np" --no-prefix-output -- "$dir/bin/lockstep" bench \
      "$collective" --backend "$backend" --sizes "$sizes" --seconds "$seconds" --json \
      >>"$out/$side.json"
  done
done
python3 - "$out/base.json" "$out/new.json" "$collective" "$np" <<'PY'
import json, statistics, sys
def load(path):
    runs = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            j = json.loads(line)
            runs.setdefault(j["bytes"], []).append(j["median_us"])
    return runs
base, new = load(sys.argv[1]), load(sys.argv[2])
print(f"# {sys.argv[3]}, np={sys.argv[4]}, median over rounds of each round's median latency")
print(f"{'bytes':>10} {'base us':>12} {'new us':>12} {'new/base':>9} {'spread base':>12} {'spread new':>11}")
for b in sorted(set(base) & set(new)):
    mb, mn = statistics.median(base[b]), statistics.median(new[b])
    spread = lambda xs: (max(xs) - min(xs)) / statistics.median(xs)
    print(f"{b:>10} {mb:>12.2f} {mn:>12.2f} {mn / mb:>9.2f} {spread(base[b]):>12.2f} {spread(new[b]):>11.2f}")
    print(json.dumps({"bytes": b, "base_median_us": mb, "new_median_us": mn,
                      "ratio": mn / mb}), file=sys.stderr)
PY
