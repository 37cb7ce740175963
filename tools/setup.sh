#!/usr/bin/env bash
# setup.sh: installs what the build needs on a fresh Debian 12 / Ubuntu 24.04 machine (apt
# packages; only the missing ones), checks for the CUDA toolkit, and configures + builds stepgraph
# into ./build (or $STEPGRAPH_BUILD_DIR). Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${STEPGRAPH_BUILD_DIR:-build}

packages=(cmake ninja-build g++ catch2 libfmt-dev nlohmann-json3-dev libcli11-dev ccache)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

NVCC=${CUDACXX:-/usr/local/cuda/bin/nvcc}
if [ ! -x "$NVCC" ]; then
  echo "setup: the CUDA toolkit (nvcc, cuBLAS, CUPTI) was not found at $NVCC." >&2
  echo "       Install CUDA 13 (or set CUDACXX to its nvcc) and run this again." >&2
  exit 1
fi

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$NVCC" "${launcher[@]}"
fi
echo "setup: building in $BUILD_DIR ($(nproc) jobs)"
cmake --build "$BUILD_DIR" -j"$(nproc)"
