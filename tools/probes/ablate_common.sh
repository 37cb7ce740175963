# ablate_common.sh: what the probes' ablation scripts (delta_prefill_phases.sh,
# delta_recurrence_ablate.sh, delta_t_ablate.sh) share, sourced by each: their options and their
# parallel builds; the timed rounds, the median and the table's common parts of the last two.
#
# ablate_parse: the caller sets `name` (its messages' prefix),
# `all` (its variants, full first), `probe_args` (the probe's default arguments) and, if it takes
# --rounds, `rounds` (its default), then calls ablate_parse "$@". It sets build_only, edits_only,
# jobs, rounds, probe_args and variants (full, then the variants named; all of them when none is),
# refuses bad options with a message and exit 2, prints the caller's header for --help, and checks
# that python3 (the edits) and, unless --edits-only, nvcc are there; then makes the folder for the
# copies, `work` (under $TMPDIR), and starts the clock, `t_start`.
ablate_parse() {
  build_only=0
  edits_only=0
  local cores v ok picked=()
  cores=$(nproc 2> /dev/null || echo 4)
  jobs=$((cores < 16 ? cores : 16))
  while [ $# -gt 0 ]; do
    case "$1" in
      --build-only) build_only=1 ;;
      --edits-only) edits_only=1 ;;
      -j | --rounds)
        if [ "$1" = --rounds ] && [ -z "${rounds:-}" ]; then
          echo "$name: unknown option --rounds" >&2
          exit 2
        fi
        [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "$name: $1 needs a positive count" >&2; exit 2; }
        if [ "$1" = -j ]; then jobs=$2; else rounds=$2; fi
        shift
        ;;
      --) shift; probe_args=("$@"); break ;;
      -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
      *)
        ok=0
        for v in "${all[@]}"; do [ "$v" = "$1" ] && ok=1; done
        [ $ok = 1 ] || { echo "$name: unknown variant '$1' (known: ${all[*]})" >&2; exit 2; }
        picked+=("$1")
        ;;
    esac
    shift
  done
  variants=(full)
  for v in "${picked[@]}"; do [ "$v" = full ] || variants+=("$v"); done
  [ ${#picked[@]} -eq 0 ] && variants=("${all[@]}")
  [ $edits_only = 1 ] || command -v nvcc > /dev/null || { echo "$name: nvcc not found" >&2; exit 2; }
  command -v python3 > /dev/null || { echo "$name: python3 not found (it makes the edits)" >&2; exit 2; }
  work=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX")
  t_start=$SECONDS
  echo "$name: ${#variants[@]} variants in $work, $jobs parallel builds"
}

# ablate_edits_only_exit: with --edits-only, says how many copies were made and exits 0.
ablate_edits_only_exit() {
  if [ $edits_only = 1 ]; then
    echo "$name: ${#variants[@]} edited copies in $work (--edits-only: nothing built)"
    exit 0
  fi
}

# ablate_build_failed VARIANT [WHAT]: a build function's report of a failed build (WHAT, e.g. its
# time, goes before the log's name): $work/VARIANT.failed, and the log's first error lines.
ablate_build_failed() {
  touch "$work/$1.failed"
  echo "  BUILD FAILED: $1 (${2:-}$work/$1.build.log):"
  grep -m 10 -E "error|Error" "$work/$1.build.log" | sed 's/^/    /' || true
}

# ablate_build_all: the caller's build function `build VARIANT` for every variant, `jobs` at a time
# (a failed build leaves $work/VARIANT.failed); sets `failed` (1 when any build failed); with
# --build-only it reports and exits (1 when any failed).
ablate_build_all() {
  local v running=0
  for v in "${variants[@]}"; do
    build "$v" &
    if ((++running >= jobs)); then
      wait -n || true
      running=$((running - 1))
    fi
  done
  wait
  failed=0
  for v in "${variants[@]}"; do if [ -e "$work/$v.failed" ]; then failed=1; fi; done
  echo "$name: builds done in $((SECONDS - t_start)) s"
  if [ $build_only = 1 ]; then
    [ $failed = 0 ] && echo "$name: every copy compiles (--build-only: nothing run)"
    exit $failed
  fi
}

# ablate_run_rounds: `rounds` rounds, each running every variant that built once, in order, with
# `probe_args`; the caller's `probe_bin VARIANT` names the program and `probe_src VARIANT` the source
# the probe's first line must name (so that a copy is known to be built from its own edit). Appends
# each run's "ms a launch" to $work/VARIANT.ms and "T kernel alone" to $work/VARIANT.tms, keeps the
# checksum in $work/VARIANT.sum; a run that fails leaves $work/VARIANT.failed and sets `failed`.
ablate_run_rounds() {
  local r v log
  for ((r = 1; r <= rounds; ++r)); do
    for v in "${variants[@]}"; do
      [ -e "$work/$v.failed" ] && continue
      log="$work/$v.run$r.log"
      if ! "$(probe_bin "$v")" "${probe_args[@]}" > "$log" 2>&1 || ! head -1 "$log" | grep -qF "$(probe_src "$v"):"; then
        echo "  RUN FAILED or not built from its copy: $v round $r ($log):"
        tail -3 "$log" | sed 's/^/    /'
        touch "$work/$v.failed"
        failed=1
        continue
      fi
      grep -oE '[0-9.]+ ms a launch' "$log" | awk '{print $1}' >> "$work/$v.ms"
      grep -oE 'T kernel alone [0-9.]+' "$log" | awk '{print $4}' >> "$work/$v.tms"
      grep -m 1 -oE 'checksum [0-9a-f]+' "$log" | awk '{print $2}' > "$work/$v.sum"
    done
    echo "  round $r done"
  done
}

# median FILE: the median of the numbers in FILE, one a line.
median() { sort -g "$1" | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# The table of the timed rounds, in three parts. ablate_table_head EXT: exits 1 when full has no
# run; prints full's first lines (the probe's shape) and sets `ref`, the median of full's
# $work/full.EXT. ablate_note VARIANT SAME: sets `note` for a variant's checksum, "(= full)" where it
# equals full's; SAME, the variant that keeps the arithmetic, must (else the note says so and
# `failed` is set). ablate_table_tail EXT: full's spread, the time taken; exits with `failed`.
ablate_table_head() {
  [ -s "$work/full.$1" ] || { echo "$name: the full kernel did not run" >&2; exit 1; }
  ref=$(median "$work/full.$1")
  echo
  sed -n '1,3p' "$work/full.run1.log"
  echo
}
ablate_note() {
  note=""
  if [ "$1" != full ] && [ "$(cat "$work/$1.sum")" = "$(cat "$work/full.sum")" ]; then note="(= full)"; fi
  if [ "$1" = "$2" ] && [ -z "$note" ]; then
    note="(UNEXPECTED: should equal full's)"
    failed=1
  fi
}
ablate_table_tail() {
  echo "spread: full's rounds $(sort -g "$work/full.$1" | tr '\n' ' ')ms"
  echo "$name: done in $((SECONDS - t_start)) s; logs in $work"
  exit $failed
}
