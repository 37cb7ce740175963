#!/usr/bin/env bash
# gpu_check.sh: the checks that need a GPU, in one run: build (build-gpu), every test (GPU tests
# included), the new kernels' GPU tests under compute-sanitizer memcheck, racecheck, initcheck and
# synccheck, a soak (`stepgraph soak`: 100,000 decode replays of the tiny preset, tokens checked
# against an eager reference, memory flat), generate on a checkpoint folder, the C interface
# example, `stepgraph bench` and `stepgraph kernels`. Logs go to OUT_DIR (default ./gpu-out); a
# short summary is printed last.
#   usage: tools/gpu_check.sh [OUT_DIR] [--no-tests] [--no-sanitize] [--no-soak] [--no-bench] [--no-kernels]
#                             [-- extra bench args]
# Build + tests + memcheck and racecheck took about 7 minutes on an H200 machine with 16 cores
# (`--no-bench --no-kernels`); initcheck and synccheck add at most 150 s each, the bf16-state
# kernels under the four tools at most 120 s each (about 45 s expected), the model-level tests
# under memcheck, initcheck and synccheck at most 200 s each (about 2.5 minutes together), the
# other GPU tests under memcheck at most 420 s (332 s measured), under initcheck at most 420 s
# and under synccheck at most 660 s, racecheck on one case a kernel family at most 300 s, the
# skinny GEMM's jitter probe at most 120 s, the soak at most 150 s (about a minute expected); the
# rest (`--no-tests --no-sanitize --no-soak`) about 3.
set -u -o pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then OUT=$1; shift; fi
mkdir -p "$OUT"
tests=1; sanitize=1; soak=1; bench=1; kernels=1; bench_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --no-tests) tests=0 ;;
    --no-sanitize) sanitize=0 ;;
    --no-soak) soak=0 ;;
    --no-bench) bench=0 ;;
    --no-kernels) kernels=0 ;;
    --) shift; bench_args=("$@"); break ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
summary=()
note() { summary+=("$*"); echo "== $*"; }

export PATH=/usr/local/cuda/bin:$PATH
# OUT_DIR keeps at most 10 files: ctest, tests_gpu, 5 sanitizer logs (memcheck; the racecheck runs;
# initcheck and synccheck; memcheck and synccheck of the wgmma and model tests), bench log + json,
# kernels (build.log only when the build failed).
# The soak's log is a temporary file: its summary line is printed, and its last lines on a failure.
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1
echo "commit: $(git rev-parse --short HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | wc -l) changed files"

start=$(date +%s)
if cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release > "$OUT/build.log" 2>&1 &&
   cmake --build build-gpu -j"$(nproc)" >> "$OUT/build.log" 2>&1; then
  note "build: ok ($(( $(date +%s) - start )) s)"
  rm -f "$OUT/build.log"  # a good build's log says nothing new
else
  tail -40 "$OUT/build.log"; note "build: FAILED (see build.log)"; printf '%s\n' "${summary[@]}"; exit 1
fi

if [ $tests = 1 ]; then
# ctest runs the CPU tests here; the GPU suite runs once, below, in one process (273 s on the H200 at 4ebc2ad).
(cd build-gpu && ctest --output-on-failure -j4 -E '^gpu:' > "$OUT/ctest.log" 2>&1); rc=$?
note "ctest (CPU tests): rc=$rc; $(grep -E 'tests passed|tests failed' "$OUT/ctest.log" | tail -1)"
grep -E '\(Failed\)|\(Skipped\)|Exception|SegFault' "$OUT/ctest.log" | head -20

timeout 400 ./build-gpu/tests/tests_gpu > "$OUT/tests_gpu.log" 2>&1
note "tests_gpu (one process): rc=$?; $(grep -E '^(All tests passed|test cases:)' "$OUT/tests_gpu.log" | tail -1) $(grep -E '^assertions:' "$OUT/tests_gpu.log" | tail -1)"
fi

if [ $sanitize = 1 ]; then
  # The kernels' GPU tests under both tools. Deliberate API errors (the bad-argument tests) are not
  # memory errors. memcheck on these tags takes about 2 minutes; racecheck is slower (the chunked
  # delta rule's cases most), so it runs the kernel tags and one chunked case (two segments with
  # history: every phase of the kernel, history in and out) by name.
  tags="[conv_fwd],[postconv],[conv_update],[gdn_prefill_fused],[capi],[delta_rule_chunked],[decode_mma],[skinny],[norms],[runner],[gated_norm]"
  timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 \
    ./build-gpu/tests/tests_gpu "$tags" > "$OUT/sanitizer-memcheck.log" 2>&1
  note "compute-sanitizer memcheck (kernel tests): rc=$?; $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-memcheck.log" | tail -1)"
  timeout 150 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 99 ./build-gpu/tests/tests_gpu \
    "[conv_fwd],[postconv],[conv_update],[gdn_prefill_fused],[capi],[skinny],[runner],[gated_norm],argmax*" > "$OUT/sanitizer-racecheck.log" 2>&1
  note "compute-sanitizer racecheck (kernel tests): rc=$?; $(grep -E 'RACECHECK SUMMARY' "$OUT/sanitizer-racecheck.log" | tail -1)"
  timeout 120 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 99 ./build-gpu/tests/tests_gpu \
    "chunked delta-rule prefill: two segments with history agree with one prefill" >> "$OUT/sanitizer-racecheck.log" 2>&1
  note "compute-sanitizer racecheck (chunked delta rule, one case): rc=$?; $(grep -E 'RACECHECK SUMMARY' "$OUT/sanitizer-racecheck.log" | tail -1)"
  # initcheck (device memory read before anything wrote it) and synccheck (__syncthreads and warp
  # syncs reached by only part of the threads that must reach them) over memcheck's tags, into one
  # log; each has 150 s.
  timeout 150 compute-sanitizer --tool initcheck --report-api-errors no --error-exitcode 99 \
    ./build-gpu/tests/tests_gpu "$tags" > "$OUT/sanitizer-initcheck-synccheck.log" 2>&1
  note "compute-sanitizer initcheck (kernel tests): rc=$?; $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-initcheck-synccheck.log" | tail -1)"
  timeout 150 compute-sanitizer --tool synccheck --report-api-errors no --error-exitcode 99 \
    ./build-gpu/tests/tests_gpu "$tags" >> "$OUT/sanitizer-initcheck-synccheck.log" 2>&1
  note "compute-sanitizer synccheck (kernel tests): rc=$?; $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-initcheck-synccheck.log" | tail -1)"
  # The bf16-state kernels ([ssm_state] less the model-level cases: delta-rule decode with column
  # pairs and one column, the fused gdn.decode, the scan, chunked and mma prefills), about 45 s a
  # tool, appended to the logs above; racecheck only on the delta-rule decode cases (by name), as
  # over the whole filter it does not finish the scan prefill's first case in 170 s.
  ssm="[ssm_state]~[model]"
  timeout 120 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 \
    ./build-gpu/tests/tests_gpu "$ssm" >> "$OUT/sanitizer-memcheck.log" 2>&1
  note "compute-sanitizer memcheck (bf16-state kernels): rc=$?; $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-memcheck.log" | tail -1)"
  timeout 120 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 99 \
    ./build-gpu/tests/tests_gpu 'delta-rule decode\, bf16 state*' >> "$OUT/sanitizer-racecheck.log" 2>&1
  note "compute-sanitizer racecheck (bf16-state delta-rule decode): rc=$?; $(grep -E 'RACECHECK SUMMARY' "$OUT/sanitizer-racecheck.log" | tail -1)"
  for tool in initcheck synccheck; do
    timeout 120 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 99 \
      ./build-gpu/tests/tests_gpu "$ssm" >> "$OUT/sanitizer-initcheck-synccheck.log" 2>&1
    note "compute-sanitizer $tool (bf16-state kernels): rc=$?; $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-initcheck-synccheck.log" | tail -1)"
  done
  # The tests of the wgmma kernels: the attention prefills' tests that run it beside the mma one
  # ([wgmma]: the reference cases, padding and replay, isolation, the model step at D 64) and the
  # wgmma delta-rule prefills' ([delta_rule_wgmma], about 10 s plain; [delta_rule_wgmma_t], the
  # two-kernel form's, not yet timed), with limits of their own so
  # the kernel tags above cannot use up their time. racecheck is left out: its documentation does
  # not say it tracks the reads wgmma makes through the async proxy.
  for tool in memcheck synccheck; do
    timeout 240 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 99 \
      ./build-gpu/tests/tests_gpu "[wgmma],[delta_rule_wgmma],[delta_rule_wgmma_t]" > "$OUT/sanitizer-$tool-wgmma.log" 2>&1
    note "compute-sanitizer $tool (wgmma attention and delta-rule tests): rc=$?; $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-$tool-wgmma.log" | tail -1)"
  done
  # The model-level tests (every [model] case but the deliberate memory faults: the whole decode
  # and prefill steps of the tiny presets, graphs, isolation, parity, arms, settings): memcheck,
  # initcheck and synccheck took 43, 34 and 76 s on the H200, appended to the wgmma logs.
  # racecheck is left out: it got through 6 of the 36 cases in 340 s.
  for tool in memcheck initcheck synccheck; do
    log="$OUT/sanitizer-$tool-wgmma.log"
    [ $tool = initcheck ] && log="$OUT/sanitizer-initcheck-synccheck.log"
    timeout 200 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 99 \
      ./build-gpu/tests/tests_gpu "[model]~[faults]" >> "$log" 2>&1
    note "compute-sanitizer $tool (model tests): rc=$?; $(grep -E 'ERROR SUMMARY' "$log" | tail -1)"
  done
  # memcheck over the GPU tests no filter above holds: the attention and delta-rule kernels'
  # own cases, the one-layer step (its arm matrix, manifests), the GEMM wrappers, serve, soak, arm
  # tuning, the engine's device tests (81 cases, 332 s on an H200). Left out: the cases that make
  # faults on purpose ([faults]: kernel faults and memory taken away), the Ctrl-C cases ([sigint],
  # timed by the signal) and the CUPTI case ([cupti]: the tool holds CUPTI's one subscription).
  rest="[attention],[delta_rule],[delta_rule_mma],[skeleton]~[faults]~[cupti],[gemm],[serve],[soak],[tuning]"
  rest+=",[engine],[fill],[marginal]~[faults],[pdl]"
  timeout 420 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 99 \
    ./build-gpu/tests/tests_gpu "$rest" >> "$OUT/sanitizer-memcheck.log" 2>&1
  note "compute-sanitizer memcheck (the other GPU tests): rc=$?; $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer-memcheck.log" | tail -1)"
  # initcheck and synccheck over the same cases, appended to their log; each summary is read from
  # the lines its own run added (a run cut by its limit shows none, not an earlier run's). Timed
  # only in four tag groups run at once (initcheck 183-263 s a group, synccheck 131-284 s); on the
  # model tests initcheck took 0.8x and synccheck 1.8x memcheck's time, hence the limits. (Run
  # beside other GPU processes, the [soak] cases fail: they watch the device's memory in use.)
  log="$OUT/sanitizer-initcheck-synccheck.log"
  for tool in initcheck synccheck; do
    limit=420
    [ $tool = synccheck ] && limit=660
    before=$(cat "$log" 2>/dev/null | wc -l)
    timeout $limit compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 99 \
      ./build-gpu/tests/tests_gpu "$rest" >> "$log" 2>&1
    note "compute-sanitizer $tool (the other GPU tests): rc=$?; $(tail -n +$((before + 1)) "$log" | grep -E 'ERROR SUMMARY' | tail -1)"
  done
  # racecheck on one case of each kernel family the racecheck runs above leave out (about 3
  # minutes, most of it the mma attention decode's case), appended to the racecheck log.
  log="$OUT/sanitizer-racecheck.log"
  before=$(cat "$log" 2>/dev/null | wc -l)
  timeout 300 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 99 ./build-gpu/tests/tests_gpu \
    "attention decode mma: every split*,attention prefill: the smallest shape*,attention prefill mma: rows past the live count*,attention prep: q*,attention decode: every split*,attention prefill: NaN in one slot*,mma delta-rule prefill: two segments*,delta-rule decode: every column split*,delta-rule decode: the fused gated norm*,delta-rule prefill: two segments*,rmsnorm: fused residual*,swiglu: silu*,embedding: rows*" \
    >> "$log" 2>&1
  note "compute-sanitizer racecheck (one case a kernel family): rc=$?; $(tail -n +$((before + 1)) "$log" | grep -E 'RACECHECK SUMMARY' | tail -1)"
  # The skinny GEMM's TMA ring and split-K sum under random delays (tools/probes/skinny_jitter_probe.cu,
  # which racecheck cannot see into: the copies are the async proxy's), appended to the racecheck log.
  # (The delays did not find the missing proxy fence before a stage's refill, kernels/tma_util.cuh;
  # tests_gpu "[stress]", two GEMMs at once on two streams, did.)
  if nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. -o build-gpu/skinny_jitter_probe \
       tools/probes/skinny_jitter_probe.cu kernels/skinny_gemm_shapes.cpp kernels/launch_policy.cpp \
       kernels/launch_check.cpp >> "$log" 2>&1; then
    timeout 120 ./build-gpu/skinny_jitter_probe 300 >> "$log" 2>&1
    note "skinny GEMM under random delays: rc=$?; $(tail -1 "$log")"
  else
    note "skinny GEMM under random delays: the probe did not build (see sanitizer-racecheck.log)"
  fi
fi

if [ $soak = 1 ]; then
  # 100,000 graphed decode replays of 32 rows of the tiny preset (periods of 1024 from zeroed
  # caches, greedy tokens fed back): every replay's tokens against an eager reference period,
  # device memory and host RSS against their first sample. The same count on the 4B preset
  # (`stepgraph soak` with no options) would take about 8 minutes at 4.6 ms a replay.
  soak_log=$(mktemp)
  timeout 150 ./build-gpu/tools/stepgraph soak --preset tiny --replays 100000 > "$soak_log" 2>&1
  rc=$?
  grep -E '^soak: ' "$soak_log" | tail -1
  [ $rc = 0 ] || tail -5 "$soak_log"
  note "stepgraph soak --preset tiny --replays 100000: rc=$rc"
  rm -f "$soak_log"
fi

# A checkpoint folder through the CLI on the GPU (the fixture with the real head sizes).
./build-gpu/tools/stepgraph generate --weights tests/fixtures/h32-real-head-dims --tokens 1,2,3 --max-new 12 --dtype f32 2>&1 | tail -2
note "stepgraph generate --weights (GPU, f32): rc=${PIPESTATUS[0]}"

if [ -f tools/python/example_capi.py ]; then
  STEPGRAPH_LIB=$PWD/build-gpu/kernels/capi/libstepgraph_c.so PYTHONUNBUFFERED=1 timeout 300 \
    python3 tools/python/example_capi.py > "$OUT/capi.log" 2>&1
  note "C interface example (ctypes vs PyTorch): rc=$?; $(tail -1 "$OUT/capi.log")"
  rm -f "$OUT/capi.log"  # at most 8 files come back; the summary line is enough
fi

if [ $bench = 1 ]; then
  # The main job: the whole model (decode keys at context 1024, prefill 32 x 1024), summary lines.
  timeout 400 ./build-gpu/tools/stepgraph bench --json "$OUT/bench.json" --reps 3 --replays 20 --node-replays 5 \
    "${bench_args[@]}" > "$OUT/bench.log" 2>&1
  note "stepgraph bench (model): rc=$?"
  timeout 120 ./build-gpu/tools/stepgraph bench --phase prefill --reps 1 --replays 3 --node-replays 1 \
    --delta-prefill chunked 2>&1 | grep -E "^graph prefill|delta_rule.prefill|finite after"
  note "stepgraph bench --phase prefill --delta-prefill chunked: rc=${PIPESTATUS[0]}"
  grep -E "^(graph|  (decode|prefill) )" "$OUT/bench.log"
  # One GDN layer's decode step, node by node.
  ./build-gpu/tools/stepgraph bench --workload gdn-layer 2>&1 | sed -n '/^summary/,$p'
  note "stepgraph bench --workload gdn-layer: rc=${PIPESTATUS[0]}"
  # A serving run through the captured graphs (32 requests of 1024 + 128 tokens), its summary lines.
  timeout 300 ./build-gpu/tools/stepgraph serve --trace-preset serve-c32 2>&1 | grep -E "^(requests|tokens|time to|token hash|steps)"
  note "stepgraph serve --trace-preset serve-c32: rc=${PIPESTATUS[0]}"
fi

if [ $kernels = 1 ]; then
  ./build-gpu/tools/stepgraph kernels > "$OUT/kernels.log" 2>&1
  note "stepgraph kernels: rc=$?"
  grep -vE '^(device|rule):' "$OUT/kernels.log" | grep -E '^[0-9a-z]|^  (conv|post|op )'
fi
echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
