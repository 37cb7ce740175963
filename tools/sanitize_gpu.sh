#!/usr/bin/env bash
# sanitize_gpu.sh: the GPU tests with their host code under AddressSanitizer and
# UndefinedBehaviorSanitizer (tools/sanitize.sh does the CPU tests; this is the host side that
# only runs with a GPU: the model step's construction, graph capture and replay bookkeeping, the
# CUPTI records, the launchers in the .cu files). Configures build-asan-gpu/ (or
# $STEPGRAPH_ASAN_GPU_BUILD_DIR) with -DSG_SANITIZE=ON -DSG_SANITIZE_GPU=ON: the host C++ at -O1
# -g1 with -fsanitize=address -fsanitize=undefined -fno-sanitize-recover=undefined, nvcc's host
# code with the same flags (device code as in the release build); builds tests_gpu and the
# `stepgraph` program it runs, then the whole suite through tools/gpu_tests.sh (the device-wide
# cases alone, the rest in N processes). Every sanitizer report aborts its process (so its cases
# fail); afterwards the logs are searched for reports, which are counted and their first lines
# printed. Leak checking is off unless --leaks: the CUDA driver and libraries keep allocations
# until the process ends, which LeakSanitizer would report (tools/lsan_cuda.supp suppresses the
# known ones and says what that can hide; the suppressed leaks are printed; the CPU run checks the
# host code's own leaks). Exit: 0 when every process passed with no report, 77 without a GPU
# (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES is set to nothing: checked before building, so
# nothing is built or run), else 1 (2 for bad options). tests/cpu/test_gpu_scripts.cpp checks this.
#   usage: tools/sanitize_gpu.sh [-j N] [-t SECONDS] [--leaks] [--out OUT_DIR] [-h]
#     -j N          processes for the shared part of the suite (default 3)
#     -t SECONDS    limit of each process (default 500)
#     --leaks       LeakSanitizer on at exit, with tools/lsan_cuda.supp
#     --out DIR     where the logs go (default ./gpu-out/asan)
set -uo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
jobs=3; limit=500; leaks=0; out="$PWD/gpu-out/asan"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs=${2:-}; shift ;;
    -t) limit=${2:-}; shift ;;
    --leaks) leaks=1 ;;
    --out) out=${2:-}; case "$out" in /*|'') ;; *) out="$caller/$out" ;; esac; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "sanitize_gpu.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$jobs" in ''|*[!0-9]*|0) echo "sanitize_gpu.sh: -j needs a positive whole number, got '$jobs'" >&2; exit 2 ;; esac
case "$limit" in ''|*[!0-9]*|0) echo "sanitize_gpu.sh: -t needs a positive number of seconds, got '$limit'" >&2; exit 2 ;; esac
BUILD_DIR=${STEPGRAPH_ASAN_GPU_BUILD_DIR:-build-asan-gpu}
NVCC=${CUDACXX:-/usr/local/cuda/bin/nvcc}
start=$(date +%s)

# No GPU: nothing to run, so nothing is built (the CUDA build takes minutes). CUDA_VISIBLE_DEVICES
# set to nothing hides every GPU, as it does from the tests.
if [ "${CUDA_VISIBLE_DEVICES-unset}" = "" ] || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "sanitize_gpu.sh: no GPU found (nvidia-smi lists none, or CUDA_VISIBLE_DEVICES is empty): nothing built or run"
  exit 77
fi
[ -x "$NVCC" ] || { echo "sanitize_gpu.sh: no nvcc at $NVCC (set CUDACXX)" >&2; exit 1; }
source tools/sanitizer_common.sh
sanitizer_fresh_dir "$BUILD_DIR" sanitize_gpu.sh
sanitizer_cmake_launcher
# Configured every time with the flags this script needs, so a folder configured otherwise (without
# SG_SANITIZE_GPU, say) gets them (cmake keeps its other settings and rebuilds what they change).
mkdir -p "$BUILD_DIR"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSG_SANITIZE=ON -DSG_SANITIZE_GPU=ON \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1 -DNDEBUG" -DCMAKE_CUDA_COMPILER="$NVCC" "${SANITIZER_LAUNCHER[@]}" \
  > "$BUILD_DIR/configure.log" 2>&1 || { cat "$BUILD_DIR/configure.log"; echo "sanitize_gpu.sh: configure failed"; exit 1; }
echo "sanitize_gpu.sh: building tests_gpu and stepgraph in $BUILD_DIR ($(nproc) jobs)"
cmake --build "$BUILD_DIR" --target tests_gpu stepgraph -j"$(nproc)" > "$BUILD_DIR/build.log" 2>&1 ||
  { tail -40 "$BUILD_DIR/build.log"; echo "sanitize_gpu.sh: FAILED (build; log $BUILD_DIR/build.log)"; exit 1; }
echo "sanitize_gpu.sh: built in $(( $(date +%s) - start )) s"

# As tools/sanitize.sh (sanitizer_common.sh): a report aborts its process.
sanitizer_export "$leaks"
[ $leaks = 1 ] && export LSAN_OPTIONS="suppressions=$PWD/tools/lsan_cuda.supp:print_suppressions=1"
mkdir -p "$out" && rm -f "$out"/solo.log "$out"/shard*.log  # only this run's logs are searched below
bash tools/gpu_tests.sh -j "$jobs" -t "$limit" --bin "$BUILD_DIR/tests/tests_gpu" --out "$out"
rc=$?
[ $rc = 77 ] && exit 77
reports=$(cat "$out"/*.log | grep -cE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:')
if [ "$reports" != 0 ]; then
  echo "sanitize_gpu.sh: $reports sanitizer report(s):"
  grep -hE -A3 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$out"/*.log | head -40
fi
if [ $leaks = 1 ]; then  # what tools/lsan_cuda.supp hid, per entry (count, bytes), over the processes
  echo "sanitize_gpu.sh: suppressed leaks (count bytes entry):"
  cat "$out"/*.log | awk '/^Suppressions used:/ {on = 1; next} on && /^ *[0-9]+ +[0-9]+ / {c[$3] += $1; b[$3] += $2}
    on && /^-+$/ {on = 0} END {for (k in c) printf "  %d %d %s\n", c[k], b[k], k}'
fi
echo "sanitize_gpu.sh: $([ $rc = 0 ] && [ "$reports" = 0 ] && echo passed || echo FAILED): tests rc=$rc, $reports sanitizer report(s), leaks $([ $leaks = 1 ] && echo checked || echo not checked) ($(( $(date +%s) - start )) s; logs in $out)"
[ $rc = 0 ] && [ "$reports" = 0 ]
