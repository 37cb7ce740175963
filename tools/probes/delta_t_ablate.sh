#!/usr/bin/env bash
# delta_t_ablate.sh: where the T kernel of the two-kernel delta-rule prefill (delta_chunk_t_kernel in
# kernels/delta_rule_prefill_wgmma_t.cu, with chunk_t and mask_p of kernels/delta_rule_wgmma_chunk.cuh;
# `--delta-prefill wgmma-t`, the `auto` form on compute capability 9.0) spends its time. It writes
# edited copies of both files to a folder per variant (one part of the chunk's work removed or
# changed, below), builds tools/probes/delta_prefill_probe.cu -DSG_PROBE_WGMMA_T once per copy (in
# parallel; the copies come first on the include path, so the probe's one-kernel form, which shares
# chunk_t, is built from the same copy), runs the copies in ROUNDS rounds (each round every copy
# once, in order) on the 4B prefill shape (32 x 1024 tokens, Hk 16, Hv 32: two v-heads a T block)
# and prints one table: variant, the median of the T kernel alone over the rounds, what the edit
# saves against `full`, the T kernel's registers and spill bytes (ptxas -v; both forms, two and one
# v-heads a block) and the checksum of one launch's output and final state. full and one-vhead keep
# the arithmetic and must print full's checksum; every other copy computes or stores something
# else and prints its own, by design (the recurrence then reads those records: only the T kernel's
# time is the measurement).
#   full        the two files as they are (copied verbatim)
#   one-vhead   one v-head a block whatever the heads (what the blocks of two gain)
#   no-p        no P = Q K^T: no product, mask or stores of P's parts
#   no-exp      every decay weight 1: no exp in P's mask or in A's
#   no-inverse  no substitutions, 16 x 16 merges or off-diagonal block: T's parts made from A as it is
#   no-diag16   the inverse without its four 16 x 16 substitutions (the merges and the off-diagonal
#               block run on what A leaves)
#   no-merge16  the inverse without the merges of the 16 x 16 blocks into the two 32 x 32 ones
#   no-offdiag  the inverse without the off-diagonal 32 x 32 block
#   no-parts    T's f32 tile left as it is (no bf16 parts): the record gets its first bytes
#   no-record   T's parts and the gates computed and not stored (P's stores stay)
# Each edit names the exact text it changes; python3 stops (exit 1) when an anchor is not found as
# often as expected, before anything is built; a copy that does not compile is reported and the
# script exits 1 after timing the others.
#   usage: tools/probes/delta_t_ablate.sh [--build-only | --edits-only] [--rounds N] [-j JOBS]
#                                         [VARIANT ...] [-- PROBE ARGS]
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

all=(full one-vhead no-p no-exp no-inverse no-diag16 no-merge16 no-offdiag no-parts no-record)
name=delta_t_ablate
rounds=2
probe_args=(32 1024 10)
. tools/probes/ablate_common.sh
ablate_parse "$@"

kernel=kernels/delta_rule_prefill_wgmma_t.cu
chunk=kernels/delta_rule_wgmma_chunk.cuh

# ---- 1. The edited copies: $work/VARIANT/kernels/ holds both files.
python3 - "$kernel" "$chunk" "$work" "${variants[@]}" << 'PY'
import os
import sys

sys.path.insert(0, "tools/probes")
from ablate_edits import EditError, find_once, replace as rep, write_copies  # noqa: E402

kernel, chunk, work, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
orig = (open(kernel).read(), open(chunk).read())


def one_vhead(k, c):
    return rep(k, "{ return delta_rule_prefill_wgmma_t_chunk_heads(Hk, Hv) == 2; }",
               "{ return false && delta_rule_prefill_wgmma_t_chunk_heads(Hk, Hv) == 2; }", "one-vhead: chunk_t_pairs"), c


def no_p(k, c):
    s = find_once(k, "  {  // P = Q K^T, as the one-kernel form's state warpgroups compute it, into the record's P parts.\n",
                  "no-p: the P block's start")
    e = find_once(k, "  __syncthreads();  // every warpgroup's P product has read the q tile\n", "no-p: the P block's end")
    if e < s:
        raise EditError("no-p: the P block's end comes before its start")
    return k[:s] + "  // probe edit: no P\n" + k[e:], c


def no_exp(k, c):
    return k, rep(c, "expf(static_cast<float>(gt.G[r] - gt.G[c]))", "1.0f", "no-exp: P's and A's weights", count=2)


def no_diag16(k, c):
    return k, rep(c, "  chunk_inverse::diagonal_blocks16<kLDT>(Ts, ai, lane);  // four 16 x 16 blocks, a warp each\n",
                  "", "no-diag16: the diagonal blocks")


def no_merge16(k, c):
    return k, rep(c, "  chunk_inverse::merge16<kLDT>(Ts, ai, AuxBarrier{bar});  // the two 32 x 32 blocks\n", "",
                  "no-merge16: the merges")


def no_offdiag(k, c):
    return k, rep(c, "  chunk_inverse::off_diagonal<kLDT, 128, AuxBarrier, true>(Ts, ai, AuxBarrier{bar});\n", "",
                  "no-offdiag: the off-diagonal block")


def no_inverse(k, c):
    for part in (no_diag16, no_merge16, no_offdiag):
        k, c = part(k, c)
    return k, c


def no_parts(k, c):
    return k, rep(c, "  t_parts(Ts, reinterpret_cast<unsigned char*>(Ts), ai, bar);\n", "", "no-parts: t_parts")


def no_record(k, c):
    # A condition false at run time that the compiler cannot fold keeps every value computed.
    k = rep(k, "    *reinterpret_cast<uint4*>(record + 16 * i) =", "    if (p.max_seqs < 0) *reinterpret_cast<uint4*>(record + 16 * i) =",
            "no-record: T's parts")
    return rep(k, "    *reinterpret_cast<uint4*>(record + rec::kRecGates + 16 * i) =",
               "    if (p.max_seqs < 0) *reinterpret_cast<uint4*>(record + rec::kRecGates + 16 * i) =",
               "no-record: the gates"), c


edits = {"full": lambda k, c: (k, c), "one-vhead": one_vhead, "no-p": no_p, "no-exp": no_exp,
         "no-inverse": no_inverse, "no-diag16": no_diag16, "no-merge16": no_merge16, "no-offdiag": no_offdiag,
         "no-parts": no_parts, "no-record": no_record}


def write(n, kc):
    os.makedirs(f"{work}/{n}/kernels")
    open(f"{work}/{n}/{kernel}", "w").write(kc[0])
    open(f"{work}/{n}/{chunk}", "w").write(kc[1])


write_copies("delta_t_ablate", names, edits, orig, write)
PY
ablate_edits_only_exit

# ---- 2. Builds (the probe with the copy compiled in; the copy's folder first on the include path).
build() {
  local v=$1
  if ! nvcc -O3 -std=c++20 -fmad=false --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a -I"$work/$v" -I. \
    -DSG_PROBE_WGMMA_T -DSG_PROBE_KERNEL="\"$work/$v/$kernel\"" -Xptxas -v -o "$work/$v/probe" \
    tools/probes/delta_prefill_probe.cu kernels/delta_rule_prefill_wgmma.cu kernels/launch_check.cpp \
    kernels/launch_policy.cpp > "$work/$v.build.log" 2>&1; then
    ablate_build_failed "$v"
    return 0
  fi
  # The T kernel's registers and spills, two v-heads a block, then one: the ptxas lines after each entry.
  awk '/Compiling entry.*delta_chunk_t_kernelILi2E/ { on = 2 } /Compiling entry.*delta_chunk_t_kernelILi1E/ { on = 1 }
       on && /spill stores/ { sp[on] = $5 } on && /Used [0-9]+ registers/ { r[on] = $5 "r/" sp[on]; on = 0 }
       END { print r[2] "," r[1] }' "$work/$v.build.log" > "$work/$v.regs"
  echo "  built $v"
}
ablate_build_all

# ---- 3. Rounds, then the table (medians over the rounds).
probe_bin() { echo "$work/$1/probe"; }
probe_src() { echo "$work/$1/$kernel"; }
ablate_run_rounds
ablate_table_head tms
echo "medians of $rounds rounds of the T kernel alone; saved = full's ms minus the variant's (what the"
echo "edit costs, less whatever overlapped it); registers/spill bytes of the two-v-head and one-v-head forms"
printf '%-10s %9s %9s %8s %17s  %s\n' variant "T ms" "saved ms" "saved %" "regs/spill (2,1)" checksum
for v in "${variants[@]}"; do
  if [ ! -s "$work/$v.tms" ]; then
    printf '%-10s %9s\n' "$v" "no run"
    continue
  fi
  ablate_note "$v" one-vhead
  awk -v k="$v" -v m="$(median "$work/$v.tms")" -v r="$ref" -v rg="$(cat "$work/$v.regs" 2> /dev/null)" \
    -v s="$(cat "$work/$v.sum")" -v n="$note" \
    'BEGIN { printf "%-10s %9.4f %9.4f %7.1f%% %17s  %s %s\n", k, m, r - m, 100 * (r - m) / r, rg, s, n }'
done
ablate_table_tail tms
