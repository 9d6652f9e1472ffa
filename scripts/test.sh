#!/usr/bin/env bash
# Sets up, builds everything and runs the whole test suite: the main build's
# ctest, then ASan+UBSan builds of the non-LibTorch layers, a TSan build of
# the engine and 30 s of each libFuzzer target (scripts/fuzz.sh).
#
#   bash scripts/test.sh            everything
#   bash scripts/test.sh --quick    main build's tests only
set -euo pipefail
cd "$(dirname "$0")/.."

# Every stage prints how long it took, and the list is printed again at the
# end (also when a stage fails), so CI's budget (under 60 min on a slow day)
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
summary() {
  echo "== stage durations"
  printf '%s\n' "${stages[@]}"
  printf '%6d s  total\n' "$SECONDS"
}
trap summary EXIT

stage "set-up: Debian and npm packages" bash scripts/setup.sh --deps-only
stage "build: main (RelWithDebInfo), everything" bash scripts/setup.sh --all
jobs=$(nproc)

stage "tests: main build" ctest --test-dir build --output-on-failure -j"$jobs" --timeout 900

[[ "${1:-}" == "--quick" ]] && exit 0

sanitized_build() {  # sanitized_build <dir> <sanitizers>
  local dir=$1 sanitizers=$2
  if [[ ! -f "$dir/build.ninja" ]]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLOCKSTEP_WITH_TORCH=OFF \
      -DLOCKSTEP_BUILD_BENCH=OFF -DLOCKSTEP_SANITIZE="$sanitizers"
  fi
  cmake --build "$dir" -j"$jobs"
}
sanitized() {  # sanitized <dir> <sanitizers> <ctest args...>
  local dir=$1 sanitizers=$2
  shift 2
  stage "build: $sanitizers ($dir)" sanitized_build "$dir" "$sanitizers"
  stage "tests: $sanitizers build ($dir): $*" \
    ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 900 "$@"
}

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Open MPI leaks by design at finalize (and from dlclose'd plugins that
# LeakSanitizer cannot name), so its tests run without leak detection.
LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  sanitized build-asan address,undefined -L 'comm|launcher|rendezvous|engine|data' -LE mpi
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 stage "tests: address,undefined build (build-asan): -L mpi" \
  ctest --test-dir build-asan --output-on-failure -j"$jobs" --timeout 900 -L mpi
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp
sanitized build-tsan thread -L engine

stage "fuzz: 30 s per target" bash scripts/fuzz.sh 30
