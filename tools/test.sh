#!/usr/bin/env bash
# test.sh: the quick start's test command (and what CI runs). Sets up and builds
# (tools/setup.sh), then runs every test through ctest: CPU tests everywhere; GPU tests run when a
# CUDA device is present and are reported as skipped otherwise. The last line counts them.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1
BUILD_DIR=${STEPGRAPH_BUILD_DIR:-build}
log=$(mktemp)
(cd "$BUILD_DIR" && ctest --output-on-failure -j"$(nproc)" "$@") 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
failed=$(sed -n 's/.*, \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)
skipped=$(grep -c '(Skipped)' "$log" || true)
rm -f "$log"
if [ -z "$total" ]; then
  echo "tests: ctest ran no tests (rc=$rc)"
  exit $(( rc == 0 ? 1 : rc ))
fi
passed=$(( total - failed - skipped ))
[ "$skipped" -gt 0 ] && echo "($skipped GPU tests skipped: no usable CUDA device on this machine)"
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit "$rc"
