#!/usr/bin/env bash
# A renamed public header keeps a forwarding header for a while
# (CHANGELOG.md): a program written against the old name still compiles,
# and the compiler names the new header and the new names.
#   forwarding_headers_test.sh SOURCE_DIR CXX
set -euo pipefail
src=$1 cxx=$2
out=$(printf '#include "lockstep/data/pipeline.h"\nlockstep::data::PipelineOptions options;\nint main() {}\n' |
      "$cxx" -std=c++20 -fsyntax-only -I"$src/include" -x c++ - 2>&1) || {
  echo "a program including lockstep/data/pipeline.h no longer compiles:"; echo "$out"; exit 1; }
for needle in "include lockstep/data/loader.h" "renamed lockstep::data::LoaderOptions"; do
  grep -qF "$needle" <<<"$out" || { echo "the warning does not say '$needle':"; echo "$out"; exit 1; }
done
echo "lockstep/data/pipeline.h forwards to lockstep/data/loader.h with deprecation warnings"
