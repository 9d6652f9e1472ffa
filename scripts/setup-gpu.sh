#!/usr/bin/env bash
# The GPU build, after `bash scripts/setup.sh --gpu` installed its packages
# (or found --deps-prefix DIR): docs/gpu.md.
# A GPU node usually has a pip or conda LibTorch with CUDA and no Debian dev
# packages. lockstep's GPU build needs, besides that LibTorch, the CUDA
# toolkit (nvcc's folder on PATH or CUDAToolkit_ROOT) and NCCL (the
# nvidia-nccl wheel beside torch, or NCCL_ROOT), and these packages:
#   required: fmt, nlohmann-json, CLI11, OpenSSL (libcrypto), zlib, libjpeg,
#             libpng, ISA-L, LMDB;  tests: googletest
#   optional: HDF5 (its data format), protobuf (tf.train.Example records:
#             off beside a LibTorch that exports its own protobuf), Open MPI
#             and Gloo (their transports), Google Benchmark (bench/).
#   bash scripts/setup-gpu.sh [--deps-prefix DIR] [--no-tests]
set -euo pipefail
cd "$(dirname "$0")/.."

DEPS_PREFIX=""
TESTS=ON
while (($#)); do
  case $1 in
    --deps-prefix) DEPS_PREFIX=$(realpath "$2"); shift 2 ;;
    --no-tests) TESTS=OFF; shift ;;
    *) echo "setup-gpu: unknown argument '$1' (--deps-prefix DIR, --no-tests)" >&2; exit 2 ;;
  esac
done

PY=${PYTHON:-python3}
TORCH_CMAKE=$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) || {
  echo "setup-gpu: '$PY -c \"import torch\"' failed: install a CUDA LibTorch (pip install torch)" \
       "or set PYTHON to the Python that has it" >&2
  exit 1
}
"$PY" -c 'import torch, sys; sys.exit(0 if torch.version.cuda else 1)' || {
  echo "setup-gpu: the LibTorch of $PY has no CUDA (torch.version.cuda is None)" >&2
  exit 1
}
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=$PATH:/usr/local/cuda/bin  # where the CUDA toolkit installs by default
fi

prefix_path="$TORCH_CMAKE"
extra=()
if [[ -n "$DEPS_PREFIX" ]]; then
  # dpkg -x keeps absolute links (libz.so -> /lib/.../libz.so.1.2.13): point
  # them into the prefix.
  while IFS= read -r link; do
    target=$(readlink "$link")
    [[ $target == /* && -e "$DEPS_PREFIX$target" ]] && ln -sfn "$DEPS_PREFIX$target" "$link"
  done < <(find "$DEPS_PREFIX" -type l)
  prefix_path="$prefix_path;$DEPS_PREFIX/usr"
  extra+=(-DOPENSSL_ROOT_DIR="$DEPS_PREFIX/usr"
          "-DCMAKE_LIBRARY_PATH=$DEPS_PREFIX/usr/lib/x86_64-linux-gnu"
          "-DCMAKE_INCLUDE_PATH=$DEPS_PREFIX/usr/include;$DEPS_PREFIX/usr/include/x86_64-linux-gnu"
          "-DCMAKE_BUILD_RPATH=$DEPS_PREFIX/usr/lib/x86_64-linux-gnu")
fi
BUILD_DIR=${LOCKSTEP_BUILD_DIR:-build-gpu}
echo "setup-gpu: configuring $BUILD_DIR (LibTorch: $TORCH_CMAKE)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix_path" \
  -DLOCKSTEP_BUILD_BENCH=OFF -DLOCKSTEP_BUILD_TESTS="$TESTS" -DLOCKSTEP_WITH_CUDA=ON "${extra[@]}"
targets=(lockstep lockstep-fashion-mnist lockstep-bench-train)
[[ $TESTS == ON ]] && targets+=(torch_cuda_test lockstep_comm_nccl_tests)
echo "setup-gpu: building ${targets[*]}"
cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${targets[@]}"
echo "setup-gpu: done; run the GPU checks with: bash scripts/gpu-check.sh $BUILD_DIR"
