#!/usr/bin/env bash
# run.sh: the quick start's main job. Sets up and builds (tools/setup.sh), then runs
# `stepgraph bench` (extra arguments are passed on). On a machine without a GPU, stepgraph says so
# and runs the CPU reference on the tiny preset instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
exec "${STEPGRAPH_BUILD_DIR:-build}/tools/stepgraph" bench "$@"
