#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) and runs each for a bounded
# time from its seed corpus in fuzz/corpus/. A crash or sanitizer report fails
# the script and leaves the reproducer in build-fuzz/artifacts/. Being CI's
# clang build, it also parses the comm and engine layers (the fuzz targets
# already bring base, data, rendezvous and launcher), whose locks clang
# checks (-Werror=thread-safety; include/lockstep/base/mutex.h).
#
#   bash scripts/fuzz.sh [SECONDS_PER_TARGET [TARGET...]]    (default 30)
#
# TARGETs (rendezvous, launch-block, records, hdf5, safetensors, torch-save) build and run only those
# and skip the parse of comm and engine; SECONDS 0 builds and runs no target,
# only the parse (scripts/ci-planted.sh uses both).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift $(($# > 0))
dir=build-fuzz
# File by file (LOCKSTEP_UNITY=OFF), unlike CI's other trees: this is the
# tree where each source of base, rendezvous, launcher and data is compiled
# alone and each of comm and engine parsed alone, so a source that forgets
# an include fails here even when its unity batch brings the header.
if [[ ! -f $dir/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S . -B $dir -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DLOCKSTEP_WITH_TORCH=OFF -DLOCKSTEP_BUILD_BENCH=OFF -DLOCKSTEP_BUILD_TESTS=OFF \
    -DLOCKSTEP_BUILD_FUZZ=ON -DLOCKSTEP_SANITIZE=address,undefined,fuzzer-no-link -DLOCKSTEP_UNITY=OFF
fi
targets=(lockstep-fuzz-rendezvous lockstep-fuzz-launch-block lockstep-fuzz-records lockstep-fuzz-hdf5
         lockstep-fuzz-safetensors lockstep-fuzz-torch-save)
(($#)) && targets=("${@/#/lockstep-fuzz-}")
((seconds > 0)) || targets=()
((${#targets[@]} == 0)) || cmake --build $dir -j"$(nproc)" --target "${targets[@]}"
# The thread-safety analysis is part of clang's front end, so the comm and
# engine sources are only parsed (-fsyntax-only, their flags from
# compile_commands.json): the same errors in half the CPU of compiling them.
(($#)) || python3 - $dir/compile_commands.json <<'PY' | xargs -0 -n1 -P"$(nproc)" bash -c
import json, re, sys
for e in json.load(open(sys.argv[1])):
    if re.search(r"/src/(comm|engine)/", e["file"]):
        cmd = re.sub(r" -o \S+ -c ", " -fsyntax-only ", e["command"])
        print(f'cd {e["directory"]} && {cmd}', end="\0")
PY
mkdir -p $dir/artifacts
source scripts/ci-stages.sh  # the sanitizer options of CI's ASan+UBSan tests
export ASAN_OPTIONS=$ci_asan_options LSAN_OPTIONS=$ci_lsan_options UBSAN_OPTIONS=$ci_ubsan_options
for t in "${targets[@]}"; do
  name=${t#lockstep-fuzz-}
  corpus=$dir/corpus/$name
  mkdir -p "$corpus"
  echo "== fuzz: $t for ${seconds}s (seeds: fuzz/corpus/$name)"
  # -close_fd_mask=2 hides the server's refused-connection lines; libFuzzer
  # and the sanitizers keep their own copy of stderr for reports.
  status=0
  # libhdf5 checks malloc's result for sizes a corrupt header asks for, so
  # ASan should return NULL there as malloc would, not abort. Past 1 GiB it
  # returns NULL at once: a local heap claiming 1.4 GB (a 2 KB input) took
  # 2.6 s under ASan (shadow for four such mallocs, in the probe and again
  # in the parent; a lazy mmap that a failed read never touches without
  # ASan) and, on a loaded machine, passed libFuzzer's 10 s timeout. The
  # reader's own limits stay below it (chunks and images of 256 MiB).
  opts=$ASAN_OPTIONS
  [[ $name == hdf5 ]] && opts+=:allocator_may_return_null=1:max_allocation_size_mb=1024
  # Run from inside $dir: a CI run left the hdf5 target's ASan warnings
  # ("failed to allocate ...") in report files named ".<pid>" in the working
  # directory, the checkout's root; from here any such file stays in the
  # build tree.
  (cd $dir && ASAN_OPTIONS=$opts "bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="artifacts/$name-" -close_fd_mask=2 "corpus/$name" \
    "../fuzz/corpus/$name") >"$dir/$name.log" 2>&1 || status=$?
  grep -E "^#[0-9]+ +DONE|stat::number_of_executed_units|ERROR|SUMMARY|deadly" "$dir/$name.log" || true
  if ((status)); then
    tail -n 60 "$dir/$name.log" >&2
    echo "fuzz: $t failed (status $status); reproducer in $dir/artifacts/" >&2
    exit 1
  fi
done
((${#targets[@]} == 0)) || echo "== fuzz: all targets ran ${seconds}s without a finding"
