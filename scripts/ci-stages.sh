# How CI configures and builds its sanitizer trees, which tests each
# sanitizer stage runs and with which sanitizer options. Sourced (not run)
# by scripts/test.sh, which runs the stages, and by scripts/ci-planted.sh,
# which plants a bug per stage and checks that the stage still catches it:
# one definition, so that check builds and runs exactly what CI does.
# Every path is relative to the repository root, the working directory of
# whoever sources this; docs/ci.md says what each stage is for.

# The labels the ASan+UBSan tree tests (all but the MPI tests, with leak
# detection) and the TSan tree tests; each tree builds lockstep-tests-<label>
# for its labels (tests/CMakeLists.txt) and nothing else.
ci_asan_labels=(comm launcher rendezvous engine data)
ci_tsan_labels=(engine)

ci_labels() { local IFS='|'; echo "$*"; }  # ci_labels a b c -> a|b|c (ctest -L)

# The ctest selection of each sanitizer test stage.
ci_asan_select=(-L "$(ci_labels "${ci_asan_labels[@]}")" -LE mpi)
ci_asan_mpi_select=(-L mpi)
ci_tsan_select=(-L "$(ci_labels "${ci_tsan_labels[@]}")")

# Seconds each libFuzzer target runs (scripts/fuzz.sh).
ci_fuzz_seconds=30

# Sanitizer options of the test stages. Every report stops the process
# (halt_on_error, abort_on_error), so a finding fails its test. Open MPI
# leaks by design at finalize (and from dlclose'd plugins that
# LeakSanitizer cannot name), so its tests run without leak detection.
ci_ubsan_options=print_stacktrace=1:halt_on_error=1
ci_asan_options=detect_leaks=1:abort_on_error=1
ci_asan_mpi_options=detect_leaks=0:abort_on_error=1
ci_lsan_options=suppressions=$PWD/scripts/lsan.supp
ci_tsan_options=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp

# ci_sanitized_build <dir> <sanitizers> <label>...: configures <dir> once
# (GCC, Debug so the LOCKSTEP_DCHECKs run, no LibTorch, no benchmarks) and
# builds only the tests of <label>s and the binaries they start
# (lockstep-tests-<label>), not the tools and benchmarks nobody runs there.
ci_sanitized_build() {
  local dir=$1 sanitizers=$2
  shift 2
  if [[ ! -f "$dir/build.ninja" ]]; then
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLOCKSTEP_WITH_TORCH=OFF \
      -DLOCKSTEP_BUILD_BENCH=OFF -DLOCKSTEP_SANITIZE="$sanitizers"
  fi
  cmake --build "$dir" -j"${ci_jobs:-$(nproc)}" --target "${@/#/lockstep-tests-}"
}
