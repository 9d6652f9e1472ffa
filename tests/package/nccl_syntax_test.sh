#!/usr/bin/env bash
# The NCCL transport is built only where CUDA is found, so a CPU machine
# never compiles it: a lockstep API it calls could change under it, or a
# debug-only check (Note [NCCL block tally]) stop formatting, and only a GPU
# build would say so. This compiles its sources (-fsyntax-only, -Wall
# -Wextra -Werror) against cuda_stubs/, the declarations of the CUDA runtime
# and NCCL 2.28 they use, once as Release compiles them and once with
# LOCKSTEP_FORCE_DCHECK. It checks lockstep's side only: the real headers'
# signatures are checked where CUDA is found, by the build itself.
#   nccl_syntax_test.sh SOURCE_DIR CXX
set -euo pipefail
src=$1 cxx=$2
files=("$src"/src/comm/transport/nccl/*.cc)
for mode in -DNDEBUG -DLOCKSTEP_FORCE_DCHECK; do
  for f in "${files[@]}"; do
    "$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Werror "$mode" \
      -I"$src/tests/package/cuda_stubs" -I"$src/include" -I"$src/src" "$f" || {
      echo "${f#"$src"/} does not compile ($mode) against tests/package/cuda_stubs: fix the" \
           "source, or add the CUDA/NCCL declaration it needs to the stubs"; exit 1; }
  done
done
echo "${#files[@]} NCCL transport sources compile against the stubs, with and without DCHECKs"
