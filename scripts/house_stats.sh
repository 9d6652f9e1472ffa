#!/usr/bin/env bash
# The house statistics a tidy-up reports before and after (issue "House, second
# pass"): file length p90, function length p99, functions over 60 lines,
# assertions per function, and private includes that cross a layer.
#   scripts/house_stats.sh [--long] [root]     (root: the checkout, default .)
# --long also lists the functions over 60 lines and the crossing includes.
# Functions are what Universal Ctags calls C++ functions (definitions with a
# body, `end:` known); files are the .h/.cc of src/, include/ and tools/.
set -euo pipefail
long=0
[[ ${1:-} == --long ]] && { long=1; shift; }
root=${1:-.}
cd "$root"
command -v ctags >/dev/null || { echo "house_stats: needs Universal Ctags (apt install universal-ctags)" >&2; exit 2; }

pct() {  # pct <percent>: the nearest-rank percentile of the numbers on stdin
  sort -n | awk -v p="$1" '{ v[NR] = $1 } END { if (!NR) { print 0; exit }
    r = int((p / 100) * NR + 0.999999); if (r < 1) r = 1; print v[r] }'
}

files() { find "$@" -type f \( -name '*.cc' -o -name '*.h' \) 2>/dev/null | sort; }

echo "== files (.h/.cc) =="
for area in src include tools; do
  n=$(files "$area" | wc -l)
  p90=$(files "$area" | xargs wc -l | grep -v ' total$' | awk '{ print $1 }' | pct 90)
  echo "$area: $n files, p90 $p90 lines"
done
all_p90=$(files src include tools | xargs wc -l | grep -v ' total$' | awk '{ print $1 }' | pct 90)
echo "all: p90 $all_p90 lines"

tags=$(mktemp)
trap 'rm -f "$tags"' EXIT
ctags -R --languages=C++ --langmap=C++:+.h --kinds-C++=f --fields=+ne -f - src tools 2>/dev/null |
  awk -F'\t' '{ line = end = 0
    for (i = 4; i <= NF; i++) { if ($i ~ /^line:/) line = substr($i, 6); if ($i ~ /^end:/) end = substr($i, 5) }
    if (line && end) print end - line + 1 "\t" $2 ":" line "\t" $1 }' >"$tags"

echo "== functions =="
for area in src tools; do
  n=$(awk -F'\t' -v a="$area/" 'index($2, a) == 1' "$tags" | wc -l)
  p99=$(awk -F'\t' -v a="$area/" 'index($2, a) == 1 { print $1 }' "$tags" | pct 99)
  over=$(awk -F'\t' -v a="$area/" 'index($2, a) == 1 && $1 > 60' "$tags" | wc -l)
  echo "$area: $n functions, p99 $p99 lines, $over over 60 lines"
done
if ((long)); then
  awk -F'\t' '$1 > 60 { print "  " $1 " lines  " $2 "  " $3 }' "$tags" | sort -rn
fi

echo "== assertions (src) =="
src_functions=$(awk -F'\t' 'index($2, "src/") == 1' "$tags" | wc -l)
dchecks=$(grep -rhoE '\bLOCKSTEP_DCHECK(_[A-Z]+)?\(' src | wc -l)
asserts=$( (grep -rhoE '(^|[^_[:alnum:]])assert\(' src || true) | wc -l)  # none is the goal: grep then exits 1
awk -v d="$dchecks" -v a="$asserts" -v f="$src_functions" 'BEGIN {
  printf "LOCKSTEP_DCHECK*: %d, bare assert: %d, per function: %.3f\n", d, a, (f ? (d + a) / f : 0) }'

# A private header is one under src/ (the public ones live in include/). It
# crosses a layer when src/<a>/ includes src/<b>/... for b != a, or when a
# tool includes anything from src/.
echo "== private includes across layers =="
crossing=$(
  grep -rnoE '^#include "[a-z_]+/[^"]+"' src tools | while IFS=: read -r file line inc; do
    target=${inc#\#include \"}; target=${target%\"}
    [[ -f src/$target ]] || continue
    from=${file#*/}; from=${from%%/*}
    to=${target%%/*}
    if [[ $file == tools/* || $from != "$to" ]]; then echo "$file:$line $target"; fi
  done
)
echo "from src: $(grep -c '^src/' <<<"$crossing" || true), from tools: $(grep -c '^tools/' <<<"$crossing" || true)"
if ((long)) && [[ -n $crossing ]]; then sed 's/^/  /' <<<"$crossing"; fi
