#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the main build's ctest, then
# ASan+UBSan builds of the non-LibTorch layers, a TSan build of the engine and
# 30 s of each libFuzzer target (scripts/fuzz.sh).
#
#   bash scripts/test.sh            everything
#   bash scripts/test.sh --quick    main build's tests only
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
jobs=$(nproc)

echo "== tests: main build"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 900

[[ "${1:-}" == "--quick" ]] && exit 0

sanitized() {  # sanitized <dir> <sanitizers> <ctest args...>
  local dir=$1 sanitizers=$2
  shift 2
  echo "== tests: $sanitizers build ($dir): $*"
  if [[ ! -f "$dir/build.ninja" ]]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLOCKSTEP_WITH_TORCH=OFF \
      -DLOCKSTEP_BUILD_BENCH=OFF -DLOCKSTEP_SANITIZE="$sanitizers"
  fi
  cmake --build "$dir" -j"$jobs"
  ctest --test-dir "$dir" --output-on-failure -j"$jobs" --timeout 900 "$@"
}

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Open MPI leaks by design at finalize (and from dlclose'd plugins that
# LeakSanitizer cannot name), so its tests run without leak detection.
LSAN_OPTIONS=suppressions=$PWD/scripts/lsan.supp ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  sanitized build-asan address,undefined -L 'comm|launcher|rendezvous|engine|data' -LE mpi
ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 ctest --test-dir build-asan --output-on-failure \
  -j"$jobs" --timeout 900 -L mpi
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
sanitized build-tsan thread -L engine

echo "== fuzz: 30 s per target"
bash scripts/fuzz.sh 30
