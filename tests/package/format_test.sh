#!/usr/bin/env bash
# Every C++ source is in the house format (.clang-format at the root). The
# check uses clang-format 14, Debian 12's, which scripts/setup.sh installs:
# other versions format some constructs otherwise, so without it the test
# skips rather than fail on a tool's opinion. To fix a failure, run
#   clang-format-14 -i FILE...
# on the files it names (or on the tree, as this script lists it).
#   format_test.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: format_test.sh SOURCE_DIR}
tool=$(command -v clang-format-14 || true)
[[ -n $tool ]] || { echo "SKIPPED: clang-format-14 is not installed (scripts/setup.sh)"; exit 77; }
cd "$src" || exit 1
mapfile -t files < <(find bench examples fuzz include src tests tools \
  \( -name '*.cc' -o -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
((${#files[@]} > 500)) || { echo "FAILED: found only ${#files[@]} sources under $src"; exit 1; }
# One run for the tree; each line it would change is "FILE:LINE:COL: error: ...".
out=$("$tool" --dry-run -Werror "${files[@]}" 2>&1)
rc=$?
mapfile -t bad < <(sed -nE 's/^([^:]+):[0-9]+:[0-9]+: error: .*/\1/p' <<<"$out" | sort -u)
if ((rc != 0 && ${#bad[@]} == 0)); then  # the tool itself failed (a bad .clang-format)
  echo "FAILED: $tool exited $rc:"; head -20 <<<"$out"; exit 1
fi
if ((${#bad[@]})); then
  echo "FAILED: ${#bad[@]} of ${#files[@]} sources are not in the house format (.clang-format):"
  printf '  %s\n' "${bad[@]:0:20}"
  ((${#bad[@]} > 20)) && echo "  and $((${#bad[@]} - 20)) more"
  echo "fix: clang-format-14 -i ${bad[*]:0:5}$( ((${#bad[@]} > 5)) && echo ' ...')"
  exit 1
fi
echo "all ${#files[@]} C++ sources are in the house format"
