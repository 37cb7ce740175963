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

source tools/sanitizer_common.sh
sanitizer_fresh_dir "$BUILD_DIR" sanitizers
sanitizer_cmake_launcher
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # Release, so that the CUDA compile commands equal the release build's; the host C++ at -O1
  # (the usual level for sanitizers, and quicker to compile) with line tables for the reports.
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSG_SANITIZE=ON \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -g1 -DNDEBUG" -DCMAKE_CUDA_COMPILER="$NVCC" "${SANITIZER_LAUNCHER[@]}" \
    >"$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; echo "sanitizers: configure failed"; exit 1; }
  mv "$BUILD_DIR.configure.log" "$BUILD_DIR/configure.log"
fi
echo "sanitizers: building tests_cpu in $BUILD_DIR ($(nproc) jobs)"
cmake --build "$BUILD_DIR" --target tests_cpu -j"$(nproc)" || { echo "sanitizers: FAILED (build)"; exit 1; }
built=$(date +%s)

# The test cases in two processes, one per half of the list (alternate names), run side by side:
# ctest's process per case would cost about 1.5 s of sanitizer start-up and leak check each (248
# cases: 7 minutes on two cores), one process leaves a core idle. Names go to each process in a
# file (Catch's --input-file), with Catch's special characters escaped.
# Every report aborts its process (the first one ends that half's run); leaks are checked at exit
# (sanitizer_common.sh says why each option).
sanitizer_export 1
log="$BUILD_DIR/sanitize-tests.log"
tests_dir="$BUILD_DIR/tests"
# Catch2 v2 lists names with --list-test-names-only (its exit status is the number listed), v3
# with --list-tests --verbosity quiet (v2 does not know the latter, v3 not the former).
(cd "$tests_dir" && ./tests_cpu --list-test-names-only) >"$tests_dir/names.all" 2>/dev/null
if ! grep -q . "$tests_dir/names.all"; then
  (cd "$tests_dir" && ./tests_cpu --list-tests --verbosity quiet) >"$tests_dir/names.all" 2>&1 ||
    { cat "$tests_dir/names.all"; echo "sanitizers: FAILED: tests_cpu cannot list its test cases"; exit 1; }
fi
listed=$(grep -c . "$tests_dir/names.all")
for half in 0 1; do
  grep . "$tests_dir/names.all" | awk -v h="$half" 'NR % 2 == h' | sed 's/[][\\,*~"]/\\&/g' >"$tests_dir/names.$half"
done
rcs=()
pids=()
for half in 0 1; do
  (cd "$tests_dir" && ./tests_cpu -f "names.$half") >"$log.$half" 2>&1 &
  pids[$half]=$!
done
for half in 0 1; do
  wait "${pids[$half]}"
  rcs[$half]=$?
done
cat "$log.0" "$log.1" >"$log"
end=$(date +%s)
cases=0
for half in 0 1; do
  n=$(sed -n 's/^All tests passed (.* in \([0-9]*\) test cases\{0,1\})$/\1/p' "$log.$half" | tail -1)
  cases=$(( cases + ${n:-0} ))
  if [ -z "$n" ] && [ "${rcs[$half]}" -eq 0 ]; then rcs[$half]=1; fi  # no summary line: not a pass
done
rc=$(( rcs[0] != 0 ? rcs[0] : rcs[1] ))
if [ "$rc" -ne 0 ] || [ "$cases" -ne "$listed" ] ||
   grep -qE 'runtime error:|ERROR: (AddressSanitizer|LeakSanitizer)|SUMMARY: (Address|Leak|UndefinedBehavior)Sanitizer' "$log"; then
  grep -nE -B2 -A30 'runtime error:|ERROR: (AddressSanitizer|LeakSanitizer)|FAILED:' "$log" | head -150
  grep -hE '^(All tests passed|test cases:)' "$log.0" "$log.1"
  echo "sanitizers: FAILED: tests_cpu under ASan+UBSan (exit $rc; $listed test cases listed; full output in $log)"
  exit 1
fi
echo "sanitizers: tests_cpu under ASan+UBSan: $cases test cases passed, no sanitizer report" \
  "($(( built - start ))s build, $(( end - built ))s tests)"
