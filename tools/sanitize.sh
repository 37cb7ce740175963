#!/usr/bin/env bash
# sanitize.sh: the CPU tests under AddressSanitizer and UndefinedBehaviorSanitizer (CI runs it
# before the tests). Configures build-asan/ (or $STEPGRAPH_ASAN_BUILD_DIR) with -DSG_SANITIZE=ON:
# the host C++ at -O1 -g1 with -fsanitize=address -fsanitize=undefined
# -fno-sanitize-recover=undefined -fno-omit-frame-pointer, the CUDA sources with the release
# build's flags (so ccache serves them after tools/setup.sh's build). Builds only tests_cpu and
# what it links and runs (the `stepgraph` program, sanitized too: the command-line tests run it),
# then every CPU test case (tests_cpu itself, in one process). Fails on a failed test and on any
# sanitizer report, from the tests or from a child process they start; the output is in
# build-asan/sanitize-tests.log. Needs the build's dependencies (tools/setup.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${STEPGRAPH_ASAN_BUILD_DIR:-build-asan}
NVCC=${CUDACXX:-/usr/local/cuda/bin/nvcc}
start=$(date +%s)

# A build folder configured from another checkout cannot be reused (as in tools/setup.sh).
if [ -f "$BUILD_DIR/CMakeCache.txt" ]; then
  home=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD_DIR/CMakeCache.txt")
  if [ "$home" != "$PWD" ] || [ ! -f "$BUILD_DIR/build.ninja" ]; then
    echo "sanitizers: $BUILD_DIR was configured for $home; configuring it afresh"
    rm -rf "$BUILD_DIR"
  fi
fi
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # Release, so that the CUDA compile commands equal the release build's; the host C++ at -O1
  # (the usual level for sanitizers, and quicker to compile) with line tables for the reports.
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSG_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1 -DNDEBUG" -DCMAKE_CUDA_COMPILER="$NVCC" "${launcher[@]}" \
    >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; echo "sanitizers: configure failed"; exit 1; }
  mv "$BUILD_DIR.configure.log" "$BUILD_DIR/configure.log"
fi
echo "sanitizers: building tests_cpu in $BUILD_DIR ($(nproc) jobs)"
cmake --build "$BUILD_DIR" --target tests_cpu -j"$(nproc)" || { echo "sanitizers: FAILED (build)"; exit 1; }
built=$(date +%s)

# All test cases in one process: ctest's process per case costs about 1.5 s of sanitizer start-up
# and leak check each (245 cases: 7 minutes on two cores, against about 2 in one process).
# Every report aborts its process: the first one ends the run (halt_on_error, abort_on_error), and
# one in a child process (a `stepgraph` run, a forked bad-input case) kills the child by SIGABRT,
# which those tests reject (they require a normal exit). Leaks are checked at exit (LeakSanitizer).
# protect_shadow_gap=0: the CUDA driver maps memory at fixed addresses inside ASan's shadow gap,
# so on a machine with a GPU the first CUDA call fails without it; it hides no report.
export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:protect_shadow_gap=0:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1"
log="$BUILD_DIR/sanitize-tests.log"
(cd "$BUILD_DIR/tests" && ./tests_cpu) >"$log" 2>&1
rc=$?
end=$(date +%s)
cases=$(sed -n 's/^All tests passed (.* in \([0-9]*\) test cases)$/\1/p' "$log" | tail -1)
if [ "$rc" -ne 0 ] || [ -z "$cases" ] ||
   grep -qE 'runtime error:|ERROR: (AddressSanitizer|LeakSanitizer)|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer' "$log"; then
  grep -nE -B2 -A30 'runtime error:|ERROR: (AddressSanitizer|LeakSanitizer)|FAILED:' "$log" | head -150
  tail -5 "$log"
  echo "sanitizers: FAILED: tests_cpu under ASan+UBSan (exit $rc; full output in $log)"
  exit 1
fi
echo "sanitizers: tests_cpu under ASan+UBSan: $cases test cases passed, no sanitizer report" \
  "($(( built - start ))s build, $(( end - built ))s tests)"
