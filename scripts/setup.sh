#!/usr/bin/env bash
# Installs every Debian package lockstep needs (idempotent: a second run with
# everything present only re-checks and rebuilds incrementally), then
# configures build/ and builds what the main job needs: the `lockstep` CLI and
# lockstep-fashion-mnist (the README's first command). Tests, benchmarks and
# the other tools are built by `--all` (scripts/test.sh passes it).
#
#   bash scripts/setup.sh              install + configure + build the main job
#   bash scripts/setup.sh --all        install + configure + build everything
#   bash scripts/setup.sh --deps-only  install packages only
#   bash scripts/setup.sh --gpu [--deps-prefix DIR]
#       a GPU node (docs/gpu.md): the pip LibTorch (CUDA) of `python3`, CUDA
#       and NCCL (the nvidia-nccl wheel, or NCCL_ROOT), the few Debian/Ubuntu
#       packages the GPU build needs (or, with --deps-prefix, those packages
#       unpacked with `dpkg -x` into DIR, for a node without root or network);
#       configures build-gpu/ and builds the main job, the benchmarks and the
#       GPU tests. Run the GPU checks with scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

GPU=0
[[ "${1:-}" == "--gpu" ]] && GPU=1
# The GPU build's packages (docs/gpu.md); with --deps-prefix DIR they are
# already unpacked there and nothing is installed.
GPU_PACKAGES=(cmake ninja-build g++ libfmt-dev nlohmann-json3-dev libcli11-dev libssl-dev
              zlib1g-dev libjpeg-dev libpng-dev libisal-dev liblmdb-dev libgtest-dev libgmock-dev)
if ((GPU)) && [[ " $* " == *" --deps-prefix "* ]]; then
  exec bash scripts/setup-gpu.sh "${@:2}"
fi

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libtorch-dev libopenblas0-openmp
  libopenmpi-dev openmpi-bin libgloo-dev
  libcli11-dev nlohmann-json3-dev libfmt-dev libssl-dev
  libprotobuf-dev protobuf-compiler libjpeg62-turbo-dev libpng-dev zlib1g-dev libisal-dev
  libhdf5-dev liblmdb-dev python3-h5py python3-lmdb
  dataset-fashion-mnist
  iproute2 clang libclang-rt-14-dev
  clang-format-14  # the house format's check (tests/package/format_test.sh)
  chromium  # lockstep report --png/--check and its test (headless)
  python3-torch  # the PyTorch peers in bench/ (bench/peer, bench/cnn_sgd.py)
  slurmctld slurmd slurm-client munge  # the Slurm test starts a single-node Slurm
)
# npm installs the report's charting library; a Node.js already on PATH is kept.
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)
((GPU)) && PACKAGES=("${GPU_PACKAGES[@]}")

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages: ${missing[*]}" >&2
    echo "setup: run as root (or: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "setup: installing ${#missing[@]} packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} Debian packages present"
fi

((GPU)) && exec bash scripts/setup-gpu.sh "${@:2}"

# LibTorch must find OpenBLAS (OpenMP build): the reference BLAS is ~14x slower.
blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || true)
if [[ -n "$blas" && "$blas" != *openblas* ]]; then
  echo "setup: libblas.so.3 resolves to $blas, not OpenBLAS; LibTorch will be slow." >&2
  echo "setup: fix with: update-alternatives --config libblas.so.3-x86_64-linux-gnu" >&2
fi

# The charting library `lockstep report` inlines into its pages, at the
# versions pinned in tools/report/web/package-lock.json (license kept in
# node_modules/echarts and copied into every page).
if [[ ! -f tools/report/web/node_modules/echarts/dist/echarts.min.js ]] ||
   [[ tools/report/web/package-lock.json -nt tools/report/web/node_modules/.package-lock.json ]]; then
  echo "setup: npm ci in tools/report/web (Apache ECharts for lockstep report)"
  npm ci --prefix tools/report/web --no-audit --no-fund --loglevel=error
fi

[[ "${1:-}" == "--deps-only" ]] && exit 0

BUILD_DIR=${LOCKSTEP_BUILD_DIR:-build}
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
targets=(--target lockstep lockstep-fashion-mnist)
what="the lockstep CLI and the main job"
if [[ "${1:-}" == "--all" ]]; then
  targets=()
  what="everything (libraries, tools, examples, tests, benchmarks)"
fi
echo "setup: building $what into $BUILD_DIR (from scratch: several minutes on 2 cores)"
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
echo "setup: done; binaries are in $BUILD_DIR/bin"
