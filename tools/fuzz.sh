#!/usr/bin/env bash
# fuzz.sh [SECONDS]: builds the libFuzzer targets of tests/fuzz into build-fuzz/ (clang, with
# AddressSanitizer and UndefinedBehaviorSanitizer, straight from the few pure C++ sources each
# target needs, not through the CUDA build) and runs each on a copy of its committed seed corpus
# (tests/fuzz/corpus/<target>/) for SECONDS (default 20). Exits non-zero when a target finds a
# crash, a leak, a timeout or a runaway allocation, and prints the reproducer's path; run it again
# with `build-fuzz/<target> <reproducer>`. New inputs the run finds stay in build-fuzz/corpus/.
# Installs clang (16 or newer: std::source_location) with apt-get only when it is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-20}
OUT=build-fuzz
TARGETS=(safetensors safetensors_index hf_config arms cli_tokens step_metadata lt_choices)

# A clang++ that has libFuzzer and std::source_location (clang 16+ with libstdc++ 12+).
probe_src='#include <source_location>
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return std::source_location::current().line() > 0 ? 0 : 1; }'
works() {
  command -v "$1" >/dev/null 2>&1 || return 1
  local d; d=$(mktemp -d)
  printf '%s\n' "$probe_src" > "$d/p.cpp"
  "$1" -std=c++20 -fsanitize=fuzzer,address,undefined "$d/p.cpp" -o "$d/p" >/dev/null 2>&1
  local rc=$?; rm -rf "$d"; return $rc
}
find_clang() {
  for c in ${CXX_FUZZ:-} clang++ clang++-20 clang++-19 clang++-18 clang++-17 clang++-16; do
    if works "$c"; then echo "$c"; return 0; fi
  done
  return 1
}
CXX=$(find_clang)
if [ -z "$CXX" ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "fuzz: no clang++ 16+ with libFuzzer; run as root or install clang" >&2; exit 1; }
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq
  pkgs=()
  for v in 20 19 18 17 16; do
    if apt-cache show "clang-$v" >/dev/null 2>&1; then
      pkgs=("clang-$v")
      apt-cache show "libclang-rt-$v-dev" >/dev/null 2>&1 && pkgs+=("libclang-rt-$v-dev")
      break
    fi
  done
  [ ${#pkgs[@]} -gt 0 ] || { echo "fuzz: no clang 16 or newer in the package lists" >&2; exit 1; }
  echo "fuzz: installing ${pkgs[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null || exit 1
  CXX=$(find_clang) || { echo "fuzz: ${pkgs[*]} installed but clang++ cannot build a fuzzer" >&2; exit 1; }
fi

CUDA_INC=$(dirname "$(dirname "${CUDACXX:-/usr/local/cuda/bin/nvcc}")")/include
FLAGS=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. -isystem "$CUDA_INC")
# The sources each target links (engine/error.h includes the CUDA headers, so they must be found,
# but no CUDA library is linked: tests/fuzz/fuzz_support.cpp gives sg::where).
JSON="models/json_read.cpp engine/files.cpp engine/text.cpp tests/fuzz/fuzz_support.cpp"
declare -A SRC=(
  [safetensors]="models/safetensors.cpp $JSON"
  [safetensors_index]="models/safetensors.cpp $JSON"
  [hf_config]="models/hf_config.cpp models/qwen35_config.cpp $JSON"
  [arms]="kernels/arms.cpp"
  [cli_tokens]="tools/cli/cli_checks.cpp kernels/arms.cpp engine/env.cpp engine/text.cpp tests/fuzz/fuzz_support.cpp"
  [step_metadata]="models/step_metadata.cpp kernels/contracts.cpp kernels/arms.cpp tests/fuzz/fuzz_support.cpp"
  [lt_choices]="models/lt_choices.cpp engine/tensor.cpp $JSON"
)

mkdir -p "$OUT/obj" "$OUT/corpus" "$OUT/artifacts"
echo "fuzz: building ${#TARGETS[@]} targets with $CXX into $OUT"
obj_of() { echo "$OUT/obj/$(echo "$1" | tr / _).o"; }
# Every source once, one job per core; a source is recompiled when it or any header is newer.
compile() {
  local src=$1 obj; obj=$(obj_of "$1")
  if [ ! -f "$obj" ] || [ "$src" -nt "$obj" ] ||
     [ -n "$(find engine kernels models tests/fuzz tools/cli -name '*.h' -newer "$obj" -print -quit)" ]; then
    "$CXX" "${FLAGS[@]}" -c "$src" -o "$obj" || { echo "fuzz: compiling $src failed" >&2; return 1; }
  fi
}
export -f compile obj_of
export CXX OUT
export FLAGS_STR="${FLAGS[*]}"
sources=$(for t in "${TARGETS[@]}"; do echo "tests/fuzz/fuzz_$t.cpp ${SRC[$t]}"; done | tr ' ' '\n' | sort -u)
build_failed=0
printf '%s\n' $sources | xargs -P "$(nproc)" -I{} bash -c 'FLAGS=($FLAGS_STR); compile "$1"' _ {} || build_failed=1
if [ $build_failed -eq 0 ]; then
  for t in "${TARGETS[@]}"; do
    objs=()
    for s in tests/fuzz/fuzz_$t.cpp ${SRC[$t]}; do objs+=("$(obj_of "$s")"); done
    "$CXX" "${FLAGS[@]}" "${objs[@]}" -lfmt -o "$OUT/$t" || { echo "fuzz: linking $t failed" >&2; build_failed=1; }
  done
fi
[ $build_failed -eq 0 ] || exit 1

failed=0
summary=()
start=$(date +%s)
for t in "${TARGETS[@]}"; do
  work="$OUT/corpus/$t"
  mkdir -p "$work"
  log="$OUT/$t.log"
  # The run's corpus is build-fuzz/corpus/<target>; the committed seeds are read, never written.
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$OUT/$t" "$work" "tests/fuzz/corpus/$t" -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 \
    -malloc_limit_mb=2048 -timeout=10 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$OUT/artifacts/$t-" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    failed=1
    repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "fuzz: $t FAILED (exit $rc) after ${runs:-?} inputs; reproducer: ${repro:-none written}; log: $log"
    grep -E 'ERROR:|fuzz invariant|runtime error|==ERROR|SUMMARY' "$log" | head -5 | sed 's/^/fuzz:   /'
    summary+=("$t FAILED")
  else
    echo "fuzz: $t: ${runs:-?} inputs in ${SECONDS_PER_TARGET}s, no crash, leak or timeout"
    summary+=("$t ${runs:-?}")
  fi
done
echo "fuzz: $(( $(date +%s) - start ))s for ${#TARGETS[@]} targets: ${summary[*]}"
exit $failed
