#!/usr/bin/env bash
# Sets up, builds everything and runs the whole test suite: the main build's
# ctest, then ASan+UBSan builds of the non-LibTorch layers, a TSan build of
# the engine and 30 s of each libFuzzer target (scripts/fuzz.sh). What each
# stage runs and why: docs/ci.md.
#
#   bash scripts/test.sh            everything
#   bash scripts/test.sh --quick    main build's tests only
set -euo pipefail
cd "$(dirname "$0")/.."

# Every stage prints how long it took, and the list is printed again at the
# end (also when a stage fails), so CI's budget (under 45 min on a slow day)
# is watched stage by stage.
stages=()
stage() {  # stage NAME CMD...
  local name=$1 start=$SECONDS status=0
  shift
  echo "== stage: $name"
  "$@" || status=$?
  stages+=("$(printf '%6d s  %s%s' $((SECONDS - start)) "$name" "$( ((status)) && echo " (FAILED, status $status)")")")
  echo "== stage: $name: $((SECONDS - start)) s"
  return $status
}
slowest=()
summary() {
  ((${#slowest[@]})) && printf '%s\n' "${slowest[@]}"
  echo "== stage durations"
  printf '%s\n' "${stages[@]}"
  printf '%6d s  total\n' "$SECONDS"
}
trap summary EXIT

stage "set-up: Debian and npm packages" bash scripts/setup.sh --deps-only
stage "build: main (RelWithDebInfo), everything" bash scripts/setup.sh --all
jobs=$(nproc)

# slowest_tests <junit.xml> <title>: the ten slowest tests of one ctest run,
# printed now and again in the summary at the end.
slowest_tests() {
  local list
  list=$(python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    cases = list(ET.parse(sys.argv[1]).getroot().iter("testcase"))
except (OSError, ET.ParseError) as e:
    sys.exit(f"no test times: {e}")
cases.sort(key=lambda c: float(c.get("time") or 0), reverse=True)
for c in cases[:10]:
    status = c.get("status", "run")
    print(f"{float(c.get('time') or 0):8.1f} s  {c.get('name')}" + ("" if status == "run" else f"  ({status})"))
PY
  ) || true
  slowest+=("== ten slowest tests: $2" "$list")
  printf '%s\n' "== ten slowest tests: $2" "$list"
}
# run_ctest <dir> <ctest args...>: the tests in <dir>, in parallel, then
# their ten slowest (also when some failed).
run_ctest() {
  local dir=$1 status=0
  shift
  local junit=$PWD/$dir/Testing/ci-junit-$((++ctest_runs)).xml
  ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 900 --output-junit "$junit" "$@" ||
    status=$?
  slowest_tests "$junit" "$dir $*"
  return $status
}
ctest_runs=0

stage "tests: main build" run_ctest build

[[ "${1:-}" == "--quick" ]] && exit 0

# The sanitizer trees, their labels and options: scripts/ci-stages.sh
# (shared with scripts/ci-planted.sh, the planted-bug check of these stages).
source scripts/ci-stages.sh
ci_jobs=$jobs

export UBSAN_OPTIONS=$ci_ubsan_options
stage "build: address,undefined (build-asan): tests labelled ${ci_asan_labels[*]}" \
  ci_sanitized_build build-asan address,undefined "${ci_asan_labels[@]}" mpi
LSAN_OPTIONS=$ci_lsan_options ASAN_OPTIONS=$ci_asan_options \
  stage "tests: address,undefined build (build-asan): ${ci_asan_select[*]}" \
  run_ctest build-asan "${ci_asan_select[@]}"
ASAN_OPTIONS=$ci_asan_mpi_options \
  stage "tests: address,undefined build (build-asan): ${ci_asan_mpi_select[*]}" \
  run_ctest build-asan "${ci_asan_mpi_select[@]}"

export TSAN_OPTIONS=$ci_tsan_options
stage "build: thread (build-tsan): tests labelled ${ci_tsan_labels[*]}" \
  ci_sanitized_build build-tsan thread "${ci_tsan_labels[@]}"
stage "tests: thread build (build-tsan): ${ci_tsan_select[*]}" \
  run_ctest build-tsan "${ci_tsan_select[@]}"

stage "fuzz: $ci_fuzz_seconds s per target" bash scripts/fuzz.sh "$ci_fuzz_seconds"
