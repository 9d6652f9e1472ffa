#!/usr/bin/env bash
# Does each sanitizer stage of CI still catch a real fault? A manual check,
# not part of CI: .ci/run (scripts/test.sh) never runs it; run it after a
# change to how the sanitizer trees are configured, built or tested.
#
# For each stage it plants one realistic bug in a scratch worktree of HEAD
# (`git worktree add --detach` under $TMPDIR, removed at the end;
# the checkout it is run from is not touched), builds that stage's tree as
# CI does (scripts/ci-stages.sh, scripts/fuzz.sh) but only the targets the
# check needs, and runs the tests that cover the planted code with the
# stage's own ctest selection and sanitizer options: first without the bug
# (they must pass), then with it (they must fail with the sanitizer's
# report). It prints a table (stage, planted bug, caught, the report's first
# line, seconds) and exits 1 when a plant is not caught, 2 when the check
# itself could not run (a plant that no longer applies, a failed build).
#
#   bash scripts/ci-planted.sh [--stage NAME]... [--keep]
#
# Stages: asan, ubsan, asan-mpi, tsan, fuzz and lock-check (the fuzz
# stage's other half, clang's thread-safety analysis); default: all. --keep
# leaves the scratch worktree, its build trees and logs. Compiles go through
# ccache when it is installed (the flags stay CI's), so a second run
# recompiles little more than the planted files. docs/ci.md lists the plants.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

all_stages=(asan ubsan asan-mpi tsan fuzz lock-check)
stages=()
keep=0
while (($#)); do
  case $1 in
    --stage) stages+=("${2:?--stage needs a name: ${all_stages[*]}}"); shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "ci-planted: unknown argument '$1' (--stage NAME, --keep)" >&2; exit 2 ;;
  esac
done
((${#stages[@]})) || stages=("${all_stages[@]}")
for s in "${stages[@]}"; do
  [[ " ${all_stages[*]} " == *" $s "* ]] ||
    { echo "ci-planted: unknown stage '$s' (stages: ${all_stages[*]})" >&2; exit 2; }
done

# Each stage's plant: file, perl substitution (perl -0pi: the whole file),
# what it does; then how the stage catches it: tree, sanitizers, build label
# (or fuzz target), ctest -R regex, and the report that must appear.
declare -A file expr what tree sanitizers build tests report
file[asan]=src/comm/transport/shm/shm_collectives.cc
expr[asan]='s/(if \(off < mine\) copy_bytes\(slot\(rank_, b\), bytes\(send\) \+ off, std::min\(piece, mine - off\))\)/$1 + 1)/'
what[asan]="exchange_blocks publishes one byte past the rank's own block"
tree[asan]=build-asan sanitizers[asan]=address,undefined build[asan]=comm
tests[asan]='^WorldSizes/Collectives\.AllgatherAndAllgatherv/np2 '
report[asan]='ERROR: AddressSanitizer'

file[ubsan]=src/data/record/record_frame.cc
expr[ubsan]='s/  uint64_t v = 0;\n  for \(int i = bytes - 1;.*\n  return v;/  return bytes == 8 ? *reinterpret_cast<const uint64_t*>(p) : *reinterpret_cast<const uint32_t*>(p);/'
what[ubsan]="get_le loads the little-endian fields directly (misaligned; right on x86)"
tree[ubsan]=build-asan sanitizers[ubsan]=address,undefined build[ubsan]=data
tests[ubsan]='^(RecordFormat|Corruption)\.'
report[ubsan]='runtime error:'

file[asan-mpi]=src/comm/transport/mpi/mpi_collectives.cc
expr[asan-mpi]='s/std::vector<int64_t> in = (widen\(send, in_count, dtype\));/const int64_t* in = $1.data();/; s/\bin\.data\(\)/in/g'
what[asan-mpi]="wide_average hands MPI a pointer into a temporary vector, freed before MPI reads it"
tree[asan-mpi]=build-asan sanitizers[asan-mpi]=address,undefined build[asan-mpi]=mpi
tests[asan-mpi]='^comm_mpi_collectives_np2$'
report[asan-mpi]='ERROR: AddressSanitizer'

file[tsan]=src/engine/handle.cc
expr[tsan]='s/  \{\n    MutexLock lock\(mu\);\n    done = true;\n  \}/  done = true;  \/\/ only this thread writes it/'
what[tsan]="OpState::complete_one sets done without holding mu"
tree[tsan]=build-tsan sanitizers[tsan]=thread build[tsan]=engine
tests[tsan]='^EngineCollectives\.'
report[tsan]='WARNING: ThreadSanitizer'

file[fuzz]=src/launcher/remote.cc
expr[fuzz]='s/rest_.size\(\) < nl \+ 1 \+ length \+ 1 \|\|/rest_.size() < nl + 1 + length ||/'
what[fuzz]="the launch block reader forgets the record's closing newline in its bounds check"
tree[fuzz]=build-fuzz build[fuzz]=launch-block
report[fuzz]='ERROR: AddressSanitizer|runtime error:|ERROR: libFuzzer'

# The fuzz stage's lock check: clang's -Werror=thread-safety, parsing the
# engine (scripts/fuzz.sh 0), finds the TSan plant without running it.
file[lock-check]=${file[tsan]} expr[lock-check]=${expr[tsan]} what[lock-check]=${what[tsan]}
tree[lock-check]=build-fuzz
report[lock-check]='error: .*\[-Werror,-Wthread-safety[a-z-]*\]'

start=$SECONDS
say() { printf '[%4d s] %s\n' $((SECONDS - start)) "$*"; }

# One scratch directory per user, the same every run: the unity sources CMake
# generates include the sources by absolute path, so only the same path lets
# ccache reuse the last run's objects. The lock keeps two runs apart.
scratch=${TMPDIR:-/tmp}/lockstep-planted-$(id -u)
work=$scratch/tree
logs=$scratch/logs
mkdir -p "$scratch"
exec 9>"$scratch.lock"
flock -n 9 || { echo "ci-planted: another run holds $scratch.lock" >&2; exit 2; }
cleanup() {
  if ((keep)); then
    echo "scratch worktree and logs kept: $scratch"
  else
    git -C "$root" worktree remove --force "$work" 2>/dev/null || true
    rm -rf "$scratch" "$scratch.lock"
  fi
}
trap cleanup EXIT
# What a run that was killed left behind.
git -C "$root" worktree remove --force "$work" 2>/dev/null || true
rm -rf "$work" "$logs"
git -C "$root" worktree prune
mkdir -p "$logs"
say "scratch worktree of HEAD ($(git -C "$root" rev-parse --short HEAD)) in $work"
git -C "$root" worktree add --detach --quiet "$work" HEAD
cd "$work"
source scripts/ci-stages.sh
if command -v ccache >/dev/null && [[ -z ${CMAKE_CXX_COMPILER_LAUNCHER:-} ]]; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi

# stage_env <stage>: the sanitizer options CI's stage runs its tests with.
stage_env() {
  case $1 in
    asan | ubsan) echo "ASAN_OPTIONS=$ci_asan_options LSAN_OPTIONS=$ci_lsan_options UBSAN_OPTIONS=$ci_ubsan_options" ;;
    asan-mpi) echo "ASAN_OPTIONS=$ci_asan_mpi_options UBSAN_OPTIONS=$ci_ubsan_options" ;;
    tsan) echo "TSAN_OPTIONS=$ci_tsan_options" ;;
  esac
}

# stage_select <stage>: CI's ctest selection of the stage, as lines.
stage_select() {
  case $1 in
    asan | ubsan) printf '%s\n' "${ci_asan_select[@]}" ;;
    asan-mpi) printf '%s\n' "${ci_asan_mpi_select[@]}" ;;
    tsan) printf '%s\n' "${ci_tsan_select[@]}" ;;
  esac
}

# build_stage <stage> <log>: the stage's tree, only what the check runs.
build_stage() {
  [[ ${tree[$1]} == build-fuzz ]] && return 0  # scripts/fuzz.sh builds it, in run_stage
  ci_sanitized_build "${tree[$1]}" "${sanitizers[$1]}" "${build[$1]}" >"$2" 2>&1
}

# run_stage <stage> <log> <seconds>: the stage's check, as CI runs it.
run_stage() {
  local s=$1 log=$2
  if [[ $s == lock-check ]]; then
    bash scripts/fuzz.sh 0 >"$log" 2>&1
    return
  elif [[ $s == fuzz ]]; then
    # A fresh machine's fuzz run: the seeds only, no corpus grown before.
    rm -rf "build-fuzz/corpus/${build[fuzz]}" build-fuzz/artifacts
    bash scripts/fuzz.sh "$3" "${build[fuzz]}" >"$log" 2>&1
    return
  fi
  local -a select
  mapfile -t select < <(stage_select "$s")
  env $(stage_env "$s") ctest --test-dir "${tree[$s]}" --output-on-failure --no-tests=error \
    --timeout 300 "${select[@]}" -R "${tests[$s]}" >"$log" 2>&1
}

# plant <stage>: applies the stage's bug; prints file:line.
plant() {
  local f=${file[$1]}
  perl -0pi -e "${expr[$1]}" "$f"
  if git diff --quiet -- "$f"; then
    echo "ci-planted: the $1 plant no longer applies to $f (the code changed); update" \
      "scripts/ci-planted.sh" >&2
    return 1
  fi
  echo "$f:$(git diff -U0 -- "$f" | sed -n 's/^@@ -[0-9,]* +\([0-9]*\).*/\1/p' | head -n1)"
}

rows=()
failed=0
# A Markdown table: stage | planted bug | caught | first sanitizer line | s.
row() { rows+=("$(printf '| %s | %s | %s | `%.110s` | %d |' "$@")"); }

check_stage() {
  local s=$1 t0=$SECONDS where first status=0
  if [[ ${tree[$s]} == build-fuzz ]]; then
    say "$s: scripts/fuzz.sh builds build-fuzz (${build[$s]:-no target: the parse}) as it runs"
  else
    say "$s: building ${tree[$s]} (lockstep-tests-${build[$s]}); log $logs/$s-build.log"
  fi
  if ! build_stage "$s" "$logs/$s-build.log"; then
    tail -n 30 "$logs/$s-build.log" >&2
    row "$s" "${what[$s]}" error "build failed (unplanted)" $((SECONDS - t0))
    return 2
  fi
  say "$s: the stage's tests without the bug (must pass)"
  if ! run_stage "$s" "$logs/$s-clean.log" 1; then
    tail -n 30 "$logs/$s-clean.log" >&2
    row "$s" "${what[$s]}" error "fails without the bug: $logs/$s-clean.log" $((SECONDS - t0))
    return 2
  fi
  where=$(plant "$s") || { row "$s" "${what[$s]}" error "plant does not apply" 0; return 2; }
  say "$s: planted at $where: ${what[$s]}; rebuilding"
  if ! build_stage "$s" "$logs/$s-planted-build.log"; then
    tail -n 30 "$logs/$s-planted-build.log" >&2
    git checkout --quiet -- "${file[$s]}"
    row "$s" "$where: ${what[$s]}" error "build failed (planted)" $((SECONDS - t0))
    return 2
  fi
  say "$s: the stage's tests with the bug (must fail with '${report[$s]}')"
  run_stage "$s" "$logs/$s-planted.log" "$ci_fuzz_seconds" || status=$?
  git checkout --quiet -- "${file[$s]}"
  first=$(grep -m1 -oE "(${report[$s]}).*" "$logs/$s-planted.log" || true)
  if ((status)) && [[ -n $first ]]; then
    row "$s" "$where: ${what[$s]}" yes "$first" $((SECONDS - t0))
  else
    tail -n 40 "$logs/$s-planted.log" >&2
    row "$s" "$where: ${what[$s]}" no "status $status; $logs/$s-planted.log" $((SECONDS - t0))
    return 1
  fi
}

for s in "${stages[@]}"; do
  status=0
  check_stage "$s" || status=$?
  ((status > failed)) && failed=$status
  say "$s: done"
done

printf '\n| stage | planted bug (file:line: what) | caught | first sanitizer line | s |\n'
printf '|---|---|---|---|---|\n'
printf '%s\n' "${rows[@]}"
((failed == 0)) || { ((keep)) || echo "(rerun with --keep to read the logs)"; }
exit $failed
