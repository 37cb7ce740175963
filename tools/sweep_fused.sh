#!/usr/bin/env bash
# sweep_fused.sh: times the fused gdn.prefill kernel under build-time knob settings (GPU machine).
# Each setting "STEP PREFETCH MIN_BLOCKS" reconfigures build-sweep with SG_FUSED_TUNING (only
# kernels/gdn_prefill_fused.cu recompiles), runs `stepgraph kernels` on the prefill shapes for the
# gdn.prefill op, and prints the fused row (median us; bytes==ref must stay yes: the knobs change
# no byte).
#   usage: tools/sweep_fused.sh ["4 16 4" "8 16 4" ...]   (default: a small grid around the defaults)
set -u -o pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH
settings=("$@")
[ ${#settings[@]} -eq 0 ] && settings=("4 8 4" "4 8 3" "4 4 4" "4 12 4" "2 8 4")  # around the current defaults
failed=0
shapes=${SWEEP_SHAPES:-4b-prefill-32x1024,27b-prefill-32x1024}
for s in "${settings[@]}"; do
  read -r step pf mb <<< "$s"
  flags="-DSG_FUSED_STEP=$step;-DSG_FUSED_PREFETCH=$pf;-DSG_FUSED_MIN_BLOCKS=$mb"
  tag="step=$step prefetch=$pf min_blocks=$mb"
  if ! cmake -S . -B build-sweep -G Ninja -DCMAKE_BUILD_TYPE=Release "-DSG_FUSED_TUNING=$flags" > /tmp/sweep-build.log 2>&1 ||
     ! cmake --build build-sweep -j"$(nproc)" --target stepgraph >> /tmp/sweep-build.log 2>&1; then
    echo "$tag: BUILD FAILED"; tail -20 /tmp/sweep-build.log; failed=1; continue
  fi
  if ! ./build-sweep/tools/stepgraph kernels --shape "$shapes" --op gdn.prefill > /tmp/sweep-run.log 2> /tmp/sweep-err.log; then
    echo "$tag: stepgraph kernels FAILED"; tail -20 /tmp/sweep-run.log /tmp/sweep-err.log; failed=1; continue
  fi
  awk -v tag="$tag" '/^[0-9a-z]+-prefill/ && NF == 1 {shape=$1} /gdn_prefill_fused/ {print tag, shape, "median_us", $6, "bytes==ref", $NF}' \
    /tmp/sweep-run.log | tee /tmp/sweep-rows.log
  if grep -q "bytes==ref no" /tmp/sweep-rows.log; then echo "$tag: BYTES DIFFER from the reference pair"; failed=1; fi
done
exit $failed
