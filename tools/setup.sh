#!/usr/bin/env bash
# setup.sh: makes sure the build's dependencies are present, then configures and builds stepgraph
# into ./build (or $STEPGRAPH_BUILD_DIR). Safe to run repeatedly.
# Dependencies are checked by what the build uses (commands, headers), not by package names, so a
# machine that has them from elsewhere (the GPU machine's CMake 4.4, say) needs no network. Only
# when something is missing are Debian/Ubuntu packages installed with apt-get (as root, or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${STEPGRAPH_BUILD_DIR:-build}

missing=()
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_file() { [ -e "$1" ] || missing+=("$2"); }
need_cmd cmake cmake
need_cmd ninja ninja-build
need_cmd g++ g++
[ -e /usr/include/catch2/catch.hpp ] || [ -e /usr/include/catch2/catch_test_macros.hpp ] ||
  [ -e /usr/local/include/catch2/catch_test_macros.hpp ] || missing+=(catch2)
need_file /usr/include/fmt/format.h libfmt-dev
need_file /usr/include/nlohmann/json.hpp nlohmann-json3-dev
need_file /usr/include/CLI/CLI.hpp libcli11-dev
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]} (and ccache, to speed up rebuilds)"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: missing ${missing[*]}; run as root or install them" >&2; exit 1; }
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" ccache >/dev/null
fi

NVCC=${CUDACXX:-/usr/local/cuda/bin/nvcc}
if [ ! -x "$NVCC" ]; then
  echo "setup: the CUDA toolkit (nvcc, cuBLAS, CUPTI) was not found at $NVCC." >&2
  echo "       Install CUDA 13 (or set CUDACXX to its nvcc) and run this again." >&2
  exit 1
fi

# A build folder configured from another checkout or with another generator cannot be reused.
if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
  home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD_DIR/CMakeCache.txt")
  if [ "$home" != "$PWD" ] || [ ! -f "$BUILD_DIR/build.ninja" ]; then
    echo "setup: $BUILD_DIR was configured for $home; configuring it afresh"
    rm -rf "$BUILD_DIR"
  fi
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
