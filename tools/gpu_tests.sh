#!/usr/bin/env bash
# gpu_tests.sh: the whole GPU suite (tests_gpu) on one GPU in several processes at once (its cases
# mostly run small kernels and host-side reference work, which leave the GPU idle most of the
# time, so that processes can share it: 181 cases in 185 s with -j 3 on an H200, against 273-300 s
# in one process).
# The cases that watch device-wide state or time themselves ([soak]: device memory in use;
# [faults]: memory short on purpose and kernel faults; [cupti]: the one CUPTI subscription;
# [sigint]: timed signals) run first, alone; the others are dealt out round-robin into N lists
# of test names and run as N processes at once. Each process has a time limit; a process cut by
# it counts as failed, and so does one killed (SIGKILL: most likely the host's out-of-memory
# killer, when too many processes run at once). Logs go to OUT_DIR (solo.log, shard<i>.log for
# i = 1 .. N, each process's case names beside its log in shard<i>.cases); a summary is printed
# last; the exit code is 0 only when every process passed, 77 (tests_gpu's own) when there is no
# GPU.
# With --tool, every process runs under compute-sanitizer with that tool (an error fails the
# process, and its summary line names the kernels the reports point at, most reported first) and
# the device-wide cases are left out (they fault, time signals or hold CUPTI on
# purpose); with --filter, only the cases a Catch2 test spec selects run, dealt out as above.
#   usage: tools/gpu_tests.sh [-j N] [-t SECONDS] [--bin TESTS_GPU] [--out OUT_DIR]
#                             [--filter SPEC] [--tool TOOL] [-h]
#     -j N          processes for the shared part (default 3)
#     -t SECONDS    limit of each process (default 400)
#     --bin PATH    the tests_gpu to run (default build-gpu/tests/tests_gpu, else build/tests/tests_gpu)
#     --out DIR     where the logs go (default ./gpu-out)
#     --filter SPEC only the cases this test spec selects (e.g. "[model]", "model prefill*")
#     --tool TOOL   compute-sanitizer's memcheck, racecheck, initcheck or synccheck (much slower than
#                   a plain run: give -t room, and --filter a few cases a run; racecheck over the
#                   model-level cases takes host memory enough that 12 processes at once were
#                   killed on a 128 GiB machine, so keep -j lower there)
# Catch2 v2 and v3 both read the lists (--input-file, names escaped); where a list does not select
# exactly its names, v3's --shard-count takes over (contiguous shards: less even).
set -u -o pipefail
cd "$(dirname "$0")/.."
jobs=3; limit=400; bin=""; out="$PWD/gpu-out"; filter=""; filtered=0; tool=""
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs=${2:-}; shift ;;
    -t) limit=${2:-}; shift ;;
    --bin) bin=${2:-}; shift ;;
    --out) out=${2:-}; shift ;;
    --filter) filter=${2:-}; filtered=1; shift ;;
    --tool) tool=${2:-}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_tests.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$jobs" in ''|*[!0-9]*|0) echo "gpu_tests.sh: -j needs a positive whole number, got '$jobs'" >&2; exit 2 ;; esac
case "$limit" in ''|*[!0-9]*|0) echo "gpu_tests.sh: -t needs a positive number of seconds, got '$limit'" >&2; exit 2 ;; esac
[ $filtered = 0 ] || [ -n "$filter" ] || { echo "gpu_tests.sh: --filter needs a test spec" >&2; exit 2; }
case "$tool" in
  ''|memcheck|racecheck|initcheck|synccheck) ;;
  *) echo "gpu_tests.sh: --tool must be memcheck, racecheck, initcheck or synccheck, got '$tool'" >&2; exit 2 ;;
esac
run=()  # what each process runs under
if [ -n "$tool" ]; then
  command -v compute-sanitizer > /dev/null || {
    echo "gpu_tests.sh: --tool needs compute-sanitizer on PATH (the CUDA Toolkit's bin folder)" >&2
    exit 2
  }
  run=(compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 99)
fi
if [ -z "$bin" ]; then
  for b in build-gpu/tests/tests_gpu build/tests/tests_gpu; do [ -x "$b" ] && { bin=$b; break; }; done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
  echo "gpu_tests.sh: no tests_gpu to run (${bin:-build-gpu/tests/tests_gpu and build/tests/tests_gpu}: not found; build it first)" >&2
  exit 2
fi
mkdir -p "$out" || exit 2
solo="[soak],[faults],[cupti],[sigint]"
shared="~[soak]~[faults]~[cupti]~[sigint]"
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT

# Test names, one a line, of the cases a filter (or an --input-file list) selects, in either Catch2.
if "$bin" --help 2>&1 | grep -q -- '--list-test-names-only'; then
  names() { "$bin" --list-test-names-only "$@" 2>/dev/null | grep -v '^$'; }
else
  names() { "$bin" --list-tests --verbosity quiet "$@" 2>/dev/null | grep -v '^$'; }
fi
# A name as a test spec: backslash, comma and square brackets escaped (the spec's own syntax).
escape() { sed -e 's/\\/\\\\/g' -e 's/,/\\,/g' -e 's/\[/\\[/g' -e 's/\]/\\]/g'; }

start=$(date +%s)
summary=()
failed=0
# skipped LOG: tests_gpu's line saying why it skipped (under compute-sanitizer, not the first line).
skipped() { grep -m1 'SKIPPED' "$1" || head -1 "$1"; }
# ran_none LOG: true when the process ran no test case (Catch2 v2 exits 0 when a spec matches nothing).
ran_none() { grep -q -E 'No tests ran|No test cases matched' "$1"; }
# passed LOG RC: the process exited 0 and ran a test case.
passed() { [ "$2" = 0 ] && ! ran_none "$1"; }
# selects LIST: the escaped name list selects exactly its names.
selects() { [ "$(names --input-file "$1" | wc -l)" = "$(wc -l < "$1")" ]; }
finish() {  # the summary, and the exit code
  printf '%s\n' "${summary[@]}"
  if [ $failed = 0 ]; then
    echo "gpu_tests.sh: every process passed ($(( $(date +%s) - start )) s; logs in $out)"
  else
    echo "gpu_tests.sh: FAILED (logs in $out)"
  fi
  exit $failed
}
verdict() {  # verdict LOG RC: the process's summary line
  local line killed=0
  line=$(grep -E '^(All tests passed|test cases:)' "$1" | tail -1)
  # Killed: bash's 128 + 9, or compute-sanitizer's "Target application returned an error" with 9
  # for a target that the kernel killed (timeout sends SIGTERM: 124).
  [ "$2" = 137 ] && killed=1
  [ -n "$tool" ] && [ "$2" = 9 ] && [ -z "$line" ] && killed=1
  if [ "$2" = 124 ]; then line="cut by the ${limit} s limit; ${line:-no summary}"; fi
  if [ $killed = 1 ]; then
    line="killed (SIGKILL) before it finished, most likely out of host memory: run fewer processes at once (-j)"
  fi
  if [ "$2" = 0 ] && ran_none "$1"; then line="no test case ran (a failure)"; fi
  local tool_line="" where=""
  [ -z "$tool" ] || tool_line=$(grep -E '(ERROR|RACECHECK) SUMMARY' "$1" | tail -1 | sed 's/^=* *//')
  [ -z "$tool" ] || [ "$2" = 0 ] || where=$(reported_kernels "$1")
  echo "rc=$2; ${line:-no summary (see $(basename "$1"))}${tool_line:+; $tool_line}${where:+; reported in: $where}"
}
# reported_kernels LOG: the kernels compute-sanitizer's reports name ("... access at KERNEL+0x1a70 in
# ...", "at KERNEL+0x70 in FILE:LINE"), each with its count of report lines, most first, up to 3.
reported_kernels() {
  grep -E '^=+ .* at .+\+0x[0-9a-fA-F]+' "$1" | sed -E 's/^=+ .* at (.+)\+0x[0-9a-fA-F]+.*/\1/' |
    sort | uniq -c | sort -k1,1nr | head -3 |
    awk '{ c = $1; sub(/^ *[0-9]+ /, ""); printf "%s%s (%d)", (NR > 1 ? ", " : ""), $0, c }'
}

# The cases of each part, one name a line: the device-wide cases (solo) and the others (all).
names "$solo" > "$tmp/solo_all"
if [ $filtered = 1 ]; then
  names "$filter" > "$tmp/picked"
  if [ ! -s "$tmp/picked" ]; then
    echo "gpu_tests.sh: $bin lists no test case for --filter '$filter'" >&2
    exit 1
  fi
  grep -Fx -f "$tmp/solo_all" "$tmp/picked" > "$tmp/solo" || true
  grep -Fxv -f "$tmp/solo_all" "$tmp/picked" > "$tmp/all" || true
else
  cp "$tmp/solo_all" "$tmp/solo"
  names "$shared" > "$tmp/all"
fi
nsolo=$(wc -l < "$tmp/solo")
total=$(wc -l < "$tmp/all")

if [ -n "$tool" ]; then
  [ "$nsolo" = 0 ] || summary+=("alone: $nsolo device-wide case(s) left out under compute-sanitizer ($solo)")
elif [ "$nsolo" -gt 0 ]; then
  if [ $filtered = 1 ]; then
    escape < "$tmp/solo" > "$tmp/solo_list"
    if ! selects "$tmp/solo_list"; then
      echo "gpu_tests.sh: the list of the device-wide cases --filter picks does not select them" >&2
      exit 1
    fi
    solo_sel=(--input-file "$tmp/solo_list")
  else
    solo_sel=("$solo")
  fi
  timeout "$limit" "$bin" "${solo_sel[@]}" -r compact > "$out/solo.log" 2>&1
  rc=$?
  if [ $rc = 77 ]; then  # tests_gpu's exit code when there is no GPU to run on: every case skipped
    echo "gpu_tests.sh: no GPU, nothing run: $(skipped "$out/solo.log")"
    exit 77
  fi
  passed "$out/solo.log" $rc || failed=1
  summary+=("alone ($solo): $(verdict "$out/solo.log" $rc) ($(( $(date +%s) - start )) s)")
fi

if [ "$total" = 0 ]; then  # (a filter that picks nothing was refused above)
  if [ $filtered = 0 ]; then
    echo "gpu_tests.sh: $bin lists no test case for '$shared'" >&2
    exit 1
  elif [ -n "$tool" ]; then
    echo "gpu_tests.sh: --filter '$filter' picks only device-wide cases, which run under no sanitizer" >&2
    exit 1
  fi
  finish  # the filter picked device-wide cases only, run above
fi
[ "$jobs" -gt "$total" ] && jobs=$total
mode=lists
for ((i = 0; i < jobs; i++)); do
  awk -v n="$jobs" -v i="$i" 'NR % n == i' "$tmp/all" > "$tmp/names$i"
  escape < "$tmp/names$i" > "$tmp/list$i"
  selects "$tmp/list$i" || mode=shards
done
if [ $mode = shards ] && [ $filtered = 1 ]; then
  echo "gpu_tests.sh: the name lists do not select their cases, and --filter has no shard form" >&2
  exit 1
fi
if [ $mode = shards ] && ! "$bin" --help 2>&1 | grep -q -- '--shard-count'; then
  echo "gpu_tests.sh: the name lists do not select their cases and this Catch2 has no --shard-count" >&2
  exit 1
fi
t1=$(date +%s)
for ((i = 0; i < jobs; i++)); do
  log="$out/shard$((i + 1)).log"
  if [ $mode = lists ]; then
    sel=(--input-file "$tmp/list$i")
    cp "$tmp/names$i" "${log%.log}.cases"
  else
    sel=("$shared" --shard-count "$jobs" --shard-index "$i")
    names "${sel[@]}" > "${log%.log}.cases"
  fi
  (timeout "$limit" ${run[@]+"${run[@]}"} "$bin" "${sel[@]}" -r compact > "$log" 2>&1; echo $? > "$tmp/rc$i") &
done
wait
no_gpu=1
for ((i = 0; i < jobs; i++)); do
  log="$out/shard$((i + 1)).log"
  rc=$(cat "$tmp/rc$i")
  [ "$rc" = 77 ] || no_gpu=0
  passed "$log" "$rc" || failed=1
  summary+=("shard $((i + 1)) of $jobs ($(wc -l < "${log%.log}.cases") cases): $(verdict "$log" "$rc")")
  [ "$rc" = 0 ] || [ "$rc" = 77 ] || grep -E 'failed|FAILED' "$log" | head -5
done
if [ $no_gpu = 1 ]; then  # (the solo part, which would have said so first, did not run)
  echo "gpu_tests.sh: no GPU, nothing run: $(skipped "$out/shard1.log")"
  exit 77
fi
summary+=("the other $total cases in $jobs processes at once ($mode${tool:+, under $tool}): $(( $(date +%s) - t1 )) s")
finish
