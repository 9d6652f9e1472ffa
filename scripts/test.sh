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

# The sanitizer trees build only the tests of the labels they run and the
# binaries those tests start (target lockstep-tests-<label>,
# tests/CMakeLists.txt), not the tools and benchmarks nobody runs there.
sanitized_build() {  # sanitized_build <dir> <sanitizers> <label>...
  local dir=$1 sanitizers=$2
  shift 2
  if [[ ! -f "$dir/build.ninja" ]]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLOCKSTEP_WITH_TORCH=OFF \
      -DLOCKSTEP_BUILD_BENCH=OFF -DLOCKSTEP_SANITIZE="$sanitizers"
  fi
  cmake --build "$dir" -j"$jobs" --target "${@/#/lockstep-tests-}"
}
labels() { local IFS='|'; echo "$*"; }  # labels a b c -> a|b|c (ctest -L)

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
asan=(comm launcher rendezvous engine data)
stage "build: address,undefined (build-asan): tests labelled ${asan[*]}" \
  sanitized_build build-asan address,undefined "${asan[@]}" mpi
# Open MPI leaks by design at finalize (and from dlclose'd plugins that
# LeakSanitizer cannot name), so its tests run without leak detection.
LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  stage "tests: address,undefined build (build-asan): -L $(labels "${asan[@]}") -LE mpi" \
  run_ctest build-asan -L "$(labels "${asan[@]}")" -LE mpi
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 stage "tests: address,undefined build (build-asan): -L mpi" \
  run_ctest build-asan -L mpi

export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp
stage "build: thread (build-tsan): tests labelled engine" sanitized_build build-tsan thread engine
stage "tests: thread build (build-tsan): -L engine" run_ctest build-tsan -L engine

stage "fuzz: 30 s per target" bash scripts/fuzz.sh 30
