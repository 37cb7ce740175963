#!/usr/bin/env bash
# delta_recurrence_ablate.sh: where the recurrence of the two-kernel delta-rule prefill
# (delta_rule_wgmma_t_kernel, kernels/delta_rule_prefill_wgmma_t.cu; `--delta-prefill wgmma-t`, the
# `auto` form on compute capability 9.0) spends its time. It writes edited copies of the kernel's
# source to a temporary folder, each with one part of the chunk loop removed or changed (below),
# builds tools/probes/delta_prefill_probe.cu -DSG_PROBE_WGMMA_T once per copy (in parallel), runs
# the copies in ROUNDS rounds (each round every copy once, in order, so that a drift of the card's
# clocks falls on all of them) on the 4B prefill shape (32 x 1024 tokens, Hk 16, Hv 32,
# Dk = Dv = 128, bf16 q, k, v and output, f32 state) and prints one table: variant, the median ms a
# launch over the rounds, the recurrence alone (the launch less the T kernel, which no edit
# touches), what the edit saves against `full`, the registers and spill bytes of the recurrence
# (ptxas -v) and the checksum of one launch's output and final state. full and no-turns keep the
# arithmetic (no-turns leaves the order of each warpgroup's own products as it is) and must print
# full's checksum; every other copy computes or stores something else and prints its own, by design.
#   full       the kernel as it is (copied verbatim)
#   no-store   the outputs computed and not stored (a test that never holds keeps them live)
#   no-refill  chunks 0 and 1 copied once before the loop, no copies inside it (the stages keep
#              those chunks' tiles and records)
#   refill-l2  the copies inside the loop fetch chunk 0 or 1 again (the same instructions, the data
#              from L2): set beside no-refill, it tells the copies' issue from their memory time
#   no-turns   no wgmma::Turns between the two warpgroups (each issues when it is ready)
#   no-xprime  X' = X as it is: no v tile read, no element-wise step before V'
#   no-o       no O = S Q^T product (o from V' P^T alone)
#   one-pass   one bf16 part everywhere (S^T's, X''s, V''s, T's and P's high parts only): what
#              products without the low parts would take; not the form's arithmetic (its error
#              against the split form is printed by the probe)
# Each edit names the exact text it changes; python3 stops (exit 1) when an anchor is not found as
# often as expected, before anything is built; a copy that does not compile is reported and the
# script exits 1 after timing the others.
#   usage: tools/probes/delta_recurrence_ablate.sh [--build-only | --edits-only] [--rounds N] [-j JOBS]
#                                                  [VARIANT ...] [-- PROBE ARGS]
#     --build-only  make and build every copy, run nothing (no GPU needed)
#     --edits-only  make the copies only: every edit's anchors still match the kernel (no nvcc needed)
#     --rounds N    timed rounds (default 2)
#     -j JOBS       parallel builds (default: the cores, at most 16)
#     VARIANT ...   only these (full is always included)
#     PROBE ARGS    passed to every probe run (default: 32 1024 10)
# Needs nvcc (/usr/local/cuda/bin), python3 and a GPU of compute capability 9.0 to run. A build
# takes about 40 s on one core; a run 2-3 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH

all=(full no-store no-refill refill-l2 no-turns no-xprime no-o one-pass)
name=delta_recurrence_ablate
rounds=2
probe_args=(32 1024 10)
. tools/probes/ablate_common.sh
ablate_parse "$@"

src=kernels/delta_rule_prefill_wgmma_t.cu

# ---- 1. The edited copies.
python3 - "$src" "$work" "${variants[@]}" << 'PY'
import sys

sys.path.insert(0, "tools/probes")
from ablate_edits import EditError, replace as rep, write_copies  # noqa: E402

src, work, names = sys.argv[1], sys.argv[2], sys.argv[3:]
orig = open(src).read()


REFILL_QK = "    if (ci + 1 < nchunks) load_qk(ci + 1);\n"
REFILL_REST = "    if (ci + 1 < nchunks) load_rest(ci + 1);\n"
ELEMENT_STORE = "          dev::store(p.out, p.out_dtype, ((c0 + c) * Hv + hv) * kD + vc + r0 + 8 * h, x);\n"


def no_store(t):
    # A condition false at run time that the compiler cannot fold keeps every value computed.
    t = rep(t, "        if (c < L) {\n          *reinterpret_cast<uint4*>",
            "        if (c < L && p.max_seqs < 0) {\n          *reinterpret_cast<uint4*>", "no-store: the tile's stores")
    return rep(t, ELEMENT_STORE, "          if (p.max_seqs < 0) " + ELEMENT_STORE.lstrip(), "no-store: the element stores")


def no_refill(t):
    t = rep(t, "  load_qk(0);\n  load_rest(0);\n",
            "  load_qk(0);\n  load_rest(0);\n  if (nchunks > 1) {\n    load_qk(1);\n    load_rest(1);\n  }\n",
            "no-refill: chunks 0 and 1")
    t = rep(t, REFILL_QK, "", "no-refill: q, k")
    return rep(t, REFILL_REST, "", "no-refill: the rest")


def refill_l2(t):
    t = rep(t, REFILL_QK, "    if (ci + 1 < nchunks) load_qk((ci + 1) & 1);\n", "refill-l2: q, k")
    return rep(t, REFILL_REST, "    if (ci + 1 < nchunks) load_rest((ci + 1) & 1);\n", "refill-l2: the rest")


def no_turns(t):
    t = rep(t, "  if (wg == 1) turns.pass();        // warpgroup 0 issues first\n", "", "no-turns: first pass")
    t = rep(t, "  if (wg == 0) turns.wait();\n", "", "no-turns: last wait")
    t = rep(t, "    turns.wait();\n", "", "no-turns: waits", count=3)
    return rep(t, "    turns.pass();\n", "", "no-turns: passes", count=3)


def no_xprime(t):
    s = t.index("    int nfx[2] = {kC, kC};")
    e = t.index("    nfx[0] = quad_min(nfx[0]);")
    if t.count("    int nfx[2] = {kC, kC};") != 1 or e < s:
        raise EditError("no-xprime: the X' block's anchors")
    return t[:s] + "    int nfx[2] = {kC, kC};  // probe edit: X' = X\n" + t[e:]


def no_o(t):
    o = ("#pragma unroll\n    for (int i = 0; i < 2; ++i) {\n#pragma unroll\n      for (int kk = 0; kk < 8; ++kk) {\n"
         "        wgmma::m64n64k16_rs_t<0>(oa, sf[kk][i], desc(s + sQ + 256 * kk, 128, 2048), i + kk > 0);\n"
         "      }\n    }\n")
    return rep(t, o, "#pragma unroll\n    for (int i = 0; i < 32; ++i) oa[i] = 0.0f;  // probe edit: no O\n", "no-o")


def one_pass(t):
    t = rep(t, "for (int i = 0; i < 2; ++i) {", "for (int i = 0; i < 1; ++i) {", "one-pass: S^T's parts", count=2)
    t = rep(t, "      wgmma::m64n128k16_rs_tb(st, lf[kk][1], kt);\n", "", "one-pass: the state update's low part")
    t = rep(t, "split_product(va, xf, s + sT);", "probe_hi_product(va, xf, s + sT);", "one-pass: V'")
    t = rep(t, "split_product(oa, vf, s + sP);", "probe_hi_product(oa, vf, s + sP);", "one-pass: o")
    return rep(t, "using namespace wgmma_chunk;", "using namespace wgmma_chunk;\n"
               "// probe edit: acc += A B with the high parts only\n"
               "__device__ __forceinline__ void probe_hi_product(float* acc, const uint32_t (&a)[4][2][4], uint32_t parts) {\n"
               "#pragma unroll\n"
               "  for (int kk = 0; kk < 4; ++kk) wgmma::m64n64k16_rs_t<0>(acc, a[kk][0], desc(parts + 256 * kk, 128, 1024), 1);\n"
               "}", "one-pass: helper")


edits = {"full": lambda t: t, "no-store": no_store, "no-refill": no_refill, "refill-l2": refill_l2,
         "no-turns": no_turns, "no-xprime": no_xprime, "no-o": no_o, "one-pass": one_pass}
write_copies("delta_recurrence_ablate", names, edits, orig, lambda n, t: open(f"{work}/{n}.cu", "w").write(t))
PY
ablate_edits_only_exit

# ---- 2. Builds (the probe with the copy compiled in; the one-kernel form linked for its comparison).
build() {
  local v=$1
  if ! nvcc -O3 -std=c++20 -fmad=false --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -I. \
    -DSG_PROBE_WGMMA_T -DSG_PROBE_KERNEL="\"$work/$v.cu\"" -Xptxas -v -o "$work/$v" tools/probes/delta_prefill_probe.cu \
    kernels/delta_rule_prefill_wgmma.cu kernels/launch_check.cpp kernels/launch_policy.cpp > "$work/$v.build.log" 2>&1; then
    ablate_build_failed "$v"
    return 0
  fi
  # The recurrence's registers and spills: the ptxas lines after its entry.
  awk '/Compiling entry.*delta_rule_wgmma_t_kernel/ { on = 1 } on && /spill stores/ { sp = $5 "/" $9 }
       on && /Used [0-9]+ registers/ { print $5 "r/" sp; exit }' "$work/$v.build.log" > "$work/$v.regs"
  echo "  built $v"
}
ablate_build_all

# ---- 3. Rounds, then the table (medians over the rounds).
probe_bin() { echo "$work/$1"; }
probe_src() { echo "$work/$1.cu"; }
ablate_run_rounds
ablate_table_head ms
echo "medians of $rounds rounds; saved = full's ms a launch minus the variant's (what the edit costs, less"
echo "whatever overlapped it); the recurrence = the launch less the T kernel"
printf '%-10s %10s %11s %9s %8s %10s  %s\n' variant "ms/launch" "recurrence" "saved ms" "saved %" "regs/spill" checksum
for v in "${variants[@]}"; do
  if [ ! -s "$work/$v.ms" ]; then
    printf '%-10s %10s\n' "$v" "no run"
    continue
  fi
  ablate_note "$v" no-turns
  awk -v k="$v" -v m="$(median "$work/$v.ms")" -v tm="$(median "$work/$v.tms")" -v r="$ref" \
    -v rg="$(cat "$work/$v.regs" 2> /dev/null)" -v s="$(cat "$work/$v.sum")" -v n="$note" \
    'BEGIN { printf "%-10s %10.4f %11.4f %9.4f %7.1f%% %10s  %s %s\n", k, m, m - tm, r - m, 100 * (r - m) / r, rg, s, n }'
done
ablate_table_tail ms
