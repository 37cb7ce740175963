#!/usr/bin/env bash
# delta_prefill_phases.sh: where the tensor-core delta-rule prefill (delta_rule_mma_kernel,
# kernels/delta_rule_prefill_mma.cu) spends its time, phase by phase. It writes edited copies of the
# kernel's source to a temporary folder, each with one part of the per-chunk loop removed or reduced
# (below), builds tools/probes/delta_prefill_probe.cu once per copy (-DSG_PROBE_KERNEL=the copy,
# in parallel), runs each probe on the 4B prefill shape (32 x 1024 tokens, Hk 16, Hv 32,
# Dk = Dv = 128, bf16 q, k, v, f32 state, bf16 output) and prints one table: variant, ms a launch,
# the time it saves against the unedited kernel (what the removed part costs, less what overlapped
# it), the registers and spill bytes of the timed instance (ptxas -v) and its static SASS counts
# (instructions, HMMA, LDSM, BAR.SYNC; cuobjdump, where installed): a removal that changes the
# register allocation or the unrolling moves other phases' time too, and the counts show that an
# edit removed what it meant to and nothing else; and the checksum of one launch's output and final
# state. Only `full` (a verbatim copy, timed first and last: the spread of the two is the noise)
# and P0-prefetch (an L2 hint only) keep the arithmetic and must print full's checksum; every other
# copy changes what is computed and prints its own, by design.
#
# A removed phase keeps its outputs defined (zero accumulators, or values made in registers), so
# the later phases run with their full instruction count on finite values (no NaN path is taken).
# Where accumulators become known zeros the compiler may fold a few of the epilogue's instructions.
#   full         the kernel as it is (copied verbatim)
#   P0-loads     the chunk's global reads: q, k, v made in registers (+-1/16, +-0.5 by index) and
#                still stored to shared memory; g and beta made in registers (the gates' scan
#                and exponentials kept); the next chunk's L2 prefetch removed
#   P0-prefetch  the next chunk's L2 prefetch only
#   P1a          P = q K^T and A = k K^T: the products and their fragment loads (acc = 0; the
#                exp(G_r - G_c) weights and the stores of P and A kept: P = 0, T = I)
#   P1b          [q; k] S: the products, S fragment splits and q, k ldmatrix (O = 0, X = beta v;
#                the X epilogue and the O stores kept)
#   P2-inverse   T = (I + A)^-1 on the CUDA cores, with its three barriers (T = A)
#   P3           V' = T X: the products and fragment loads (V' = 0; its NaN checks, stores and
#                bf16 splits kept)
#   P4-pv        o = O + P V': the products and fragment loads (o = O, stored)
#   P4-store     o's global stores (the values still computed: a test that never holds keeps them
#                live); the output buffer is not written, the one output this variant cannot keep
#   P4-state     S = exp(G_last) S + K^T (EL V'): the products, V' scaling and splits and K^T
#                ldmatrix (S = exp(G_last) S)
#   no-mma       every tensor-core product of P1a, P1b, P3, P4-pv and P4-state removed together:
#                what the loads, the scalar phases and the barriers cost without the products
#   mma-only     the products' own floor: only the tensor-core products (their fragment loads,
#                splits and mma) are left; P0, the gates, every epilogue, the inverse, the stores
#                and every barrier in the chunk loop are removed; shared memory is filled once
#                before the loop with small non-zero bf16 pairs (not zeros: tensor cores run
#                faster on zero operands). ptxas deletes an mma whose results are dead
#                (asm volatile does not stop it), so one accumulator of each product tile is added
#                to a register that a test that never holds stores (about 26 FADDs a chunk a
#                thread). The output is not written and the final state is the fill pattern (this
#                variant cannot keep them defined)
#   mma-sync     mma-only with four barriers a chunk at the phase boundaries (after P0, P1, P3
#                and at the chunk's end; the kernel has eight): the products' floor with the
#                phases' order kept (warps wait for the slowest one at each boundary)
#   one-pass     every split product does one bf16 pass (hi*hi) instead of three (P1b two);
#                the low parts that then feed nothing are dropped by the compiler (their
#                conversions; the X / V' low-part tiles are still written and read)
# Each edit is anchored on exact lines of the kernel's source; an anchor that does not match once
# stops the script before anything is built, every copy but `full` must differ from the source,
# and each probe must report the copy it was built from; a copy that does not compile is reported
# (its log's errors) and the script exits 1 after timing the others.
#   usage: tools/probes/delta_prefill_phases.sh [--build-only | --edits-only] [-j JOBS] [VARIANT ...] [-- PROBE ARGS]
#     --build-only  make and build every copy, run nothing (no GPU needed)
#     --edits-only  make the copies only: every edit's anchors still match the kernel (no nvcc needed)
#     -j JOBS       parallel builds (default: the cores, at most 16)
#     VARIANT ...   only these (full is always included)
#     PROBE ARGS    passed to every probe run (delta_prefill_probe's options, e.g. -- --history)
# Needs nvcc (/usr/local/cuda/bin) and python3 (the edits). A build takes 10-40 s on one core (2.8
# minutes for all 14 on 2 cores); a run about 2-3 s (15 runs, one after another).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH=/usr/local/cuda/bin:$PATH

declare -A what=(
  [full]="nothing (a verbatim copy)"
  [P0-loads]="the chunk's global reads (q, k, v, g, beta made in registers) and the L2 prefetch"
  [P0-prefetch]="the next chunk's L2 prefetch"
  [P1a]="P = q K^T, A = k K^T products (epilogue kept on zeros)"
  [P1b]="[q; k] S products (X and O epilogues kept on zeros)"
  [P2-inverse]="T = (I + A)^-1 and its three barriers (T = A)"
  [P3]="V' = T X products (V' = 0; its epilogue kept)"
  [P4-pv]="P V' products (o = O, stored)"
  [P4-store]="o's global stores (o still computed)"
  [P4-state]="K^T (EL V') products of the state update (S = exp(G_last) S)"
  [no-mma]="all the products above (P1a, P1b, P3, P4-pv, P4-state)"
  [mma-only]="all but the products: loads, gates, epilogues, inverse, stores, every barrier in the loop"
  [mma-sync]="as mma-only, with 4 phase-boundary barriers a chunk kept"
  [one-pass]="the low-part passes: one bf16 mma (hi*hi) per split product"
)
all=(full P0-loads P0-prefetch P1a P1b P2-inverse P3 P4-pv P4-store P4-state no-mma mma-only mma-sync one-pass)
name=delta_prefill_phases
probe_args=()
. tools/probes/ablate_common.sh
ablate_parse "$@"

src=kernels/delta_rule_prefill_mma.cu

# ---- 1. The edited copies. Every edit names the exact text it changes; python3 stops (exit 1)
# when an anchor is not found exactly once.
python3 - "$src" "$work" "${variants[@]}" << 'PY'
import sys

sys.path.insert(0, "tools/probes")
from ablate_edits import EditError, find_once, replace, write_copies  # noqa: E402

src, work, names = sys.argv[1], sys.argv[2], sys.argv[3:]
orig = open(src).read()


def block_end(t, i, what):
    """Index just past the newline after the '}' that closes the first code '{' at or after i
    (comments and string literals skipped)."""
    depth, k = 0, i
    while k < len(t):
        if t.startswith("//", k):
            k = t.index("\n", k)
            continue
        c = t[k]
        if c == '"':
            k = t.index('"', k + 1) + 1
            continue
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return k + 2 if t[k + 1] == "\n" else k + 1
            if depth < 0:
                break
        k += 1
    raise EditError(f"{what}: no closing brace")


def cut_block(t, anchor, new, what):
    """The statement that starts at `anchor` (through its braced block) replaced by `new`."""
    s = find_once(t, anchor, what)
    return t[:s] + new + t[block_end(t, s, what):]


def cut_between(t, start_after, end_before, new, what):
    s = find_once(t, start_after, what) + len(start_after)
    e = find_once(t, end_before, what)
    if e < s:
        raise EditError(f"{what}: the end anchor comes before the start")
    return t[:s] + new + t[e:]


HELPERS = """// ---- probe edits (tools/probes/delta_prefill_phases.sh): helpers of the edited copy.
// Four values of a chunk made in registers instead of read from global memory: +-1/16 for q and
// k (rows of L2 norm 0.71, so A and T stay finite), +-0.5 for v, signs by element index; 0 for
// elements past `valid` (rows past the chunk's end).
__device__ __forceinline__ float4 probe_synth4(int64_t at, int valid, int which) {
  const float s = which == 2 ? 0.5f : 0.0625f;
  auto e = [&](int u) {
    const uint32_t h = (static_cast<uint32_t>(at + u) * 0x9E3779B1u) >> 7;
    return u < valid ? ((h ^ static_cast<uint32_t>(which)) & 1 ? -s : s) : 0.0f;
  };
  return make_float4(e(0), e(1), e(2), e(3));
}
// chunk_io::chunk_gates with g and beta made in registers (g in [-0.07, 0], beta 0.5): the same
// shuffle scan in double and the same exponentials, no global read.
__device__ __forceinline__ void probe_gates(int64_t c0, int L, int lane, double* Gs, float* Es, float* Ls,
                                            float* Bs) {
  const int r = 2 * lane;
  const float g0 = r < L ? -0.01f * static_cast<float>((c0 + r) & 7) : 0.0f;
  const float g1 = r + 1 < L ? -0.01f * static_cast<float>((c0 + r + 1) & 7) : 0.0f;
  const float b0 = r < L ? 0.5f : 0.0f, b1 = r + 1 < L ? 0.5f : 0.0f;
  double incl = static_cast<double>(g0) + static_cast<double>(g1);
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += y;
  }
  double excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0.0;
  const double last = __shfl_sync(0xffffffffu, incl, 31);
  const double G0 = excl + static_cast<double>(g0), G1 = G0 + static_cast<double>(g1);
  Gs[r] = G0;
  Gs[r + 1] = G1;
  Es[r] = expf(static_cast<float>(G0));
  Es[r + 1] = expf(static_cast<float>(G1));
  Ls[r] = expf(static_cast<float>(last - G0));
  Ls[r + 1] = expf(static_cast<float>(last - G1));
  Bs[r] = b0;
  Bs[r + 1] = b1;
}
// mma_frag::mma_parts with one pass: the high parts only.
__device__ __forceinline__ void probe_mma_one(float* c, const Frag<4>& a, const Frag<2>& b, bool, bool) {
  mma::mma_bf16(c, a.hi, b.hi[0], b.hi[1]);
}

"""
KERNEL_DOC = "// Grid (ceil(Dv / BV) * Hv, max_seqs), block 4 * BV threads, MTile<DK, BV>::bytes of dynamic shared\n"


def helpers(t):
    return t if "probe_synth4" in t else replace(t, KERNEL_DOC, HELPERS + KERNEL_DOC, "helpers")


def p0_prefetch(t):
    return cut_block(
        t,
        "    // The next chunk's rows of q, k, v (this tile's columns), g and beta into L2 (not a read: the\n",
        "    // probe edit: the next chunk's L2 prefetch removed\n",
        "P0 prefetch",
    )


def p0_loads(t):
    t = helpers(t)
    t = replace(
        t,
        "          kx[u] = load4(p.k, p.qkv_dtype, at, ok, vec);\n"
        "          qx[u] = load4(p.q, p.qkv_dtype, at, ok, vec);\n",
        "          kx[u] = probe_synth4(at, ok, 0);  // probe edit: no global read\n"
        "          qx[u] = probe_synth4(at, ok, 1);\n",
        "P0 q, k loads",
    )
    t = replace(
        t,
        "        vx[u] = load4(p.v, p.qkv_dtype, at, r < L ? Dv - v0 - j : 0, vec);\n",
        "        vx[u] = probe_synth4(at, r < L ? 4 : 0, 2);  // probe edit: no global read\n",
        "P0 v loads",
    )
    t = replace(
        t,
        "    if (tid < 32) chunk_io::chunk_gates(p, c0, L, hv, lane, Gs, Es, Ls, Bs);\n",
        "    if (tid < 32) probe_gates(c0, L, lane, Gs, Es, Ls, Bs);  // probe edit: no global read\n",
        "P0 gates",
    )
    return p0_prefetch(t)


def p1a(t):
    what = "P1a products"
    s = find_once(
        t,
        "      if constexpr (TWO) {\n        const float* arow = (which == 0 ? Qs : Ks) + 16 * rb * LDK;\n",
        what,
    )
    e = block_end(t, s, what)  # the f32-tile branch, up to its '}'
    if not t[e - 1 :].startswith("} else {"):
        raise EditError(f"{what}: no else branch after the f32-tile branch")
    e = block_end(t, e, what)  # the bf16 (ldmatrix) branch
    return t[:s] + "      // probe edit: P1a's products removed (acc stays 0)\n" + t[e:]


def p1b(t):
    return replace(
        t,
        "      if constexpr (TWO) product(std::true_type{});\n      product(std::false_type{});\n",
        "      (void)product;  // probe edit: P1b's products removed (o1 stays 0)\n",
        "P1b products",
    )


def p2_inverse(t):
    return replace(
        t,
        "    if (tid < 64) chunk_inverse::diagonal_blocks<LDT>(Ts, tid, lane);\n"
        "    __syncthreads();\n"
        "    chunk_inverse::off_diagonal<LDT, NT>(Ts, tid);  // M = A10 T00, then T10 = -T11 M\n"
        "    __syncthreads();\n",
        "    // probe edit: the inverse removed with its three barriers (T = A)\n",
        "P2 inverse",
    )


def p3(t):
    return cut_block(
        t,
        "      for (int kb = 0; kb <= mb; ++kb) {\n        Frag<4> a;\n",
        "      // probe edit: P3's products removed (V' = 0)\n",
        "P3 products",
    )


def p4_pv(t):
    return cut_block(
        t,
        "      for (int kb = 0; kb <= mb; ++kb) {\n        const Frag<4> a = a_rows(Ps",
        "      // probe edit: P4's P V' products removed (o = O)\n",
        "P4 P V' products",
    )


def p4_store(t):
    return replace(
        t,
        "          if (r < L) store2(p.out, p.out_dtype, ((c0 + r) * Hv + hv) * Dv + v0 + j, x, y, Dv - v0 - j, vec);\n",
        "          // probe edit: the output's stores removed; a test that never holds (a NaN payload the\n"
        "          // kernel never makes) keeps x and y computed\n"
        "          if (r < L && __float_as_uint(x) == 0x7fbfffffu && __float_as_uint(y) == 0x7fbfffffu)\n"
        "            store2(p.out, p.out_dtype, ((c0 + r) * Hv + hv) * Dv + v0 + j, x, y, Dv - v0 - j, vec);\n",
        "P4 stores",
    )


def p4_state(t):
    return cut_block(
        t,
        "      const int kbs = (L + 15) / 16;\n      for (int kb = 0; kb < kbs; ++kb) {\n",
        "      // probe edit: the state update's products removed (S = exp(G_last) S)\n",
        "P4 state products",
    )


def no_mma(t):
    return p4_state(p4_pv(p3(p1b(p1a(t)))))


def one_pass(t):
    t = helpers(t)
    t = replace(t, "mma_parts(", "probe_mma_one(", "one pass", count=7)
    return replace(
        t,
        "      if constexpr (TWO) product(std::true_type{});\n",
        "      // probe edit: no low-part pass of q, k\n",
        "one pass: P1b's low pass",
    )


def mma_only(t, sync):
    bar = lambda ind: (ind + "__syncthreads();  // probe edit: a phase boundary kept\n") if sync else ""
    t = replace(
        t,
        "  for (int64_t c0 = b; c0 < e; c0 += C) {\n",
        "  // probe edit: shared memory filled once with small non-zero values (each 16-bit half a bf16\n"
        "  // of magnitude 2^-7 .. 2^-6, signs and mantissas by index: the tensor cores run faster on\n"
        "  // zeros); the products read it, nothing rewrites it. One accumulator of each product tile is\n"
        "  // added to probe_sink, which a test that never holds stores, so that ptxas keeps every mma\n"
        "  // (it removes an mma whose results are dead)\n"
        "  for (int o = tid; o < Tl::floats; o += NT)\n"
        "    sm[o] = __uint_as_float(0x3C003C00u | ((static_cast<uint32_t>(o) * 0x9E3779B1u) & 0x807F807Fu));\n"
        "  __syncthreads();\n"
        "  float probe_sink = 0.0f;\n"
        "  for (int64_t c0 = b; c0 < e; c0 += C) {\n",
        "mma-only: fill shared memory",
    )
    t = cut_block(
        t,
        "    // ---- P0: k -> Ks, q -> Qs, v tile -> Vs; rows >= L are zeros.",
        "    // probe edit: P0 (loads and shared stores) removed\n",
        "mma-only: P0",
    )
    t = p0_prefetch(t)
    t = replace(t, "    for (int j = tid; j < 2 * BV; j += NT) nfX[j] = C;\n", "", "mma-only: nfX")
    t = replace(
        t,
        "    if (tid < 32) chunk_io::chunk_gates(p, c0, L, hv, lane, Gs, Es, Ls, Bs);\n    __syncthreads();\n",
        bar("    "),
        "mma-only: gates",
    )
    t = cut_block(
        t,
        "#pragma unroll\n      for (int q = 0; q < 4; ++q) {\n"
        "        const int r = 16 * rb + g + (q >= 2 ? 8 : 0), c = 8 * nb + 2 * t + (q & 1);\n",
        "      probe_sink += acc[0];  // probe edit: P1a's epilogue removed\n",
        "mma-only: P1a epilogue",
    )
    t = cut_between(
        t,
        "      product(std::false_type{});\n",
        "    }\n    // P2: T = (I + A)^-1",
        "      // probe edit: P1b's X epilogue, its barrier and the O stores removed\n"
        "#pragma unroll\n"
        "      for (int im = 0; im < WM1; ++im) probe_sink += o1[im][0][0];\n" + bar("      "),
        "mma-only: P1b epilogue",
    )
    t = p2_inverse(t)
    end = "    }\n    __syncthreads();\n\n    // ---- P4: o = O + P V'"
    s = find_once(
        t,
        "#pragma unroll\n      for (int nt = 0; nt < 4; ++nt) {\n#pragma unroll\n        for (int q = 0; q < 4; ++q) {\n"
        "          const int r = 16 * mb + g + (q >= 2 ? 8 : 0), j = nb3 + 8 * nt + 2 * t + (q & 1);\n"
        "          const int f = nfX[j];\n",
        "mma-only: P3 epilogue",
    )
    e = find_once(t, end, "mma-only: P3 epilogue end")
    if e < s:
        raise EditError("mma-only: P3 epilogue: the end anchor comes before the start")
    t = (
        t[:s]
        + "      // probe edit: P3's NaN checks, its two barriers and the V' stores removed\n"
        + "#pragma unroll\n      for (int nt = 0; nt < 4; ++nt) probe_sink += acc[nt][0];\n    }\n"
        + bar("    ")
        + t[e + len("    }\n    __syncthreads();\n") :]
    )
    t = cut_block(
        t,
        "#pragma unroll\n      for (int nt = 0; nt < 4; ++nt) {\n#pragma unroll\n        for (int h = 0; h < 2; ++h) {\n"
        "          const int r = 16 * mb + g + 8 * h, j = nb3 + 8 * nt + 2 * t;\n          float x = acc[nt][2 * h]",
        "      // probe edit: P4's output epilogue and stores removed\n"
        "#pragma unroll\n      for (int nt = 0; nt < 4; ++nt) probe_sink += acc[nt][0];\n",
        "mma-only: P4 epilogue",
    )
    t = cut_block(
        t,
        "#pragma unroll\n      for (int mi = 0; mi < MT; ++mi) {\n#pragma unroll\n        for (int h = 0; h < 2; ++h) {\n"
        "          *reinterpret_cast<float2*>(Ss + (16 * mi + g + 8 * h) * LDS + 8 * warp + 2 * t) =",
        "      // probe edit: the state tile's stores removed\n"
        "#pragma unroll\n      for (int mi = 0; mi < MT; ++mi) probe_sink += acc[mi][0];\n",
        "mma-only: state epilogue",
    )
    t = replace(
        t,
        "    __syncthreads();  // the next chunk overwrites K, Q, V, T, P, G; P1 reads every warp's S\n",
        bar("    "),
        "mma-only: the chunk's last barrier",
    )
    return replace(
        t,
        "  // The final state tile, written once (after the last barrier).\n",
        "  // probe edit: never true (a NaN payload no product makes); keeps the products live\n"
        "  if (__float_as_uint(probe_sink) == 0x7fbfffffu) dev::store(p.out, p.out_dtype, 0, probe_sink);\n"
        "  // The final state tile, written once (after the last barrier).\n",
        "mma-only: the sink",
    )


EDITS = {
    "full": lambda t: t,
    "P0-loads": p0_loads,
    "P0-prefetch": p0_prefetch,
    "P1a": p1a,
    "P1b": p1b,
    "P2-inverse": p2_inverse,
    "P3": p3,
    "P4-pv": p4_pv,
    "P4-store": p4_store,
    "P4-state": p4_state,
    "no-mma": no_mma,
    "mma-only": lambda t: mma_only(t, False),
    "mma-sync": lambda t: mma_only(t, True),
    "one-pass": one_pass,
}
write_copies("delta_prefill_phases", names, EDITS, orig, lambda n, t: open(f"{work}/{n}.cu", "w").write(t))
PY
for v in "${variants[@]}"; do  # the same check, outside the editor
  if [ "$v" = full ]; then cmp -s "$src" "$work/$v.cu"; else ! cmp -s "$src" "$work/$v.cu"; fi ||
    { echo "delta_prefill_phases: $v.cu is not the copy it should be" >&2; exit 1; }
done
ablate_edits_only_exit

# ---- 2. Builds, in parallel; the probe's host sources once. -fmad=false as the library builds
# the kernel. ptxas -v: the registers and spills of the instance the probe runs.
flags=(-O3 -std=c++20 -fmad=false --expt-relaxed-constexpr -gencode "arch=compute_90a,code=sm_90a" -I.)
for f in launch_check launch_policy; do
  nvcc -O3 -std=c++20 -I. -c "kernels/$f.cpp" -o "$work/$f.o" || { echo "delta_prefill_phases: $f.cpp did not build" >&2; exit 1; }
done
dk=128 dv=128 tile=0 two=0
for ((i = 0; i < ${#probe_args[@]}; ++i)); do
  case "${probe_args[i]}" in
    --dk) dk=${probe_args[i + 1]} ;;
    --dv) dv=${probe_args[i + 1]} ;;
    --tile) tile=${probe_args[i + 1]} ;;
    --qkv) [ "${probe_args[i + 1]}" = f32 ] && two=1 ;;
  esac
done
bv=$tile
[ "$bv" = 0 ] && bv=$((dv % 128 == 0 ? 128 : dv % 64 == 0 ? 64 : 32))
instance="delta_rule_mma_kernelILi${dk}ELi${bv}ELb${two}ELb0E"  # GN (the fused norm) off

regs_of() {  # "R regs/S spill" of the timed instance in a build log
  awk -v inst="$instance" '
    /Compiling entry function/ { on = index($0, inst) > 0 }
    on && /spill stores/ { for (i = 1; i <= NF; ++i) if ($i == "spill" && $(i + 1) ~ /^stores/) spill = $(i - 2) }
    on && /Used [0-9]+ registers/ { for (i = 1; i <= NF; ++i) if ($i == "Used") regs = $(i + 1); print regs "/" spill; exit }
  ' "$1"
}

sass_of() {  # static SASS counts of the timed instance: instructions/HMMA/LDSM/BAR.SYNC ("-" without cuobjdump)
  if ! command -v cuobjdump > /dev/null; then
    echo -
    return
  fi
  { cuobjdump -sass "$1" || true; } | awk -v inst="$instance" '
    /Function :/ { on = index($0, inst) > 0; next }
    on && /\/\*[0-9a-f]+\*\// { ++n; if (/HMMA/) ++h; if (/LDSM/) ++l; if (/BAR\.SYNC/) ++b }
    END { printf "%d/%d/%d/%d\n", n, h, l, b }'
}

build() {
  local v=$1 t0=$SECONDS
  if nvcc "${flags[@]}" -Xptxas -v "-DSG_PROBE_KERNEL=\"$work/$v.cu\"" -o "$work/$v" \
    tools/probes/delta_prefill_probe.cu "$work/launch_check.o" "$work/launch_policy.o" > "$work/$v.build.log" 2>&1; then
    regs_of "$work/$v.build.log" > "$work/$v.regs"
    sass_of "$work/$v" > "$work/$v.sass"
    echo "  built $v ($((SECONDS - t0)) s): $instance $(cat "$work/$v.regs") regs/spill bytes," \
      "$(cat "$work/$v.sass") SASS instructions/HMMA/LDSM/BAR.SYNC"
  else
    ablate_build_failed "$v" "$((SECONDS - t0)) s, "
  fi
}
ablate_build_all

# ---- 3. Runs, one after another (full first and last), and the table.
declare -A ms sum
runs=("${variants[@]}" full)
for ((i = 0; i < ${#runs[@]}; ++i)); do
  v=${runs[i]}
  key=$v
  if [ $i -gt 0 ] && [ "$v" = full ]; then key=full-again; fi
  if [ -e "$work/$v.failed" ]; then continue; fi
  log="$work/$key.run.log"
  if ! "$work/$v" "${probe_args[@]}" > "$log" 2>&1; then
    echo "  RUN FAILED: $key ($log):"
    tail -5 "$log" | sed 's/^/    /'
    failed=1
    continue
  fi
  if ! head -1 "$log" | grep -qF "$work/$v.cu:"; then
    echo "  $key: the probe was not built from $work/$v.cu:"
    head -1 "$log" | sed 's/^/    /'
    failed=1
    continue
  fi
  ms[$key]=$(grep -oE '[0-9.]+ ms a launch' "$log" | awk '{print $1}' || true)
  sum[$key]=$(grep -oE 'checksum [0-9a-f]+' "$log" | awk '{print $2}' || true)
  echo "  ran $key: ${ms[$key]} ms a launch"
done
[ -n "${ms[full]:-}" ] || { echo "delta_prefill_phases: the full kernel did not run" >&2; exit 1; }
echo
sed -n '1,4p' "$work/full.run.log"
ref=${ms[full]}
[ -n "${ms[full-again]:-}" ] && ref=$(awk -v a="${ms[full]}" -v b="${ms[full-again]}" 'BEGIN { printf "%.4f", (a + b) / 2 }')
echo
echo "phases (saved = the full kernel's ms (mean of its two runs) minus the variant's: what the removed part"
echo "costs, less whatever overlapped it; the checksums of all but full and P0-prefetch differ by design)"
printf '%-12s %10s %10s %8s %10s %18s  %s\n' variant "ms/launch" "saved ms" "saved %" "regs/spill" "SASS/HMMA/LDSM/BAR" \
  checksum
for key in "${variants[@]}" full-again; do
  v=${key%-again}
  if [ -z "${ms[$key]:-}" ]; then
    printf '%-12s %10s\n' "$key" "$([ -e "$work/$v.failed" ] && echo "no build" || echo "no run")"
    continue
  fi
  note=""
  if [ "$key" = full ]; then
    note=""
  elif [ -n "${sum[$key]}" ] && [ "${sum[$key]}" = "${sum[full]}" ]; then
    note="(= full)"
  elif [ "$v" = full ] || [ "$v" = P0-prefetch ]; then
    note="(UNEXPECTED: should equal full's)"
    failed=1
  fi
  awk -v k="$key" -v m="${ms[$key]}" -v r="$ref" -v rg="$(cat "$work/$v.regs")" -v sa="$(cat "$work/$v.sass")" \
    -v s="${sum[$key]}" -v n="$note" \
    'BEGIN { printf "%-12s %10.4f %10.4f %7.1f%% %10s %18s  %s %s\n", k, m, r - m, 100 * (r - m) / r, rg, sa, s, n }'
done
parts=0
for v in P0-loads P1a P1b P2-inverse P3 P4-pv P4-store P4-state; do
  if [ -n "${ms[$v]:-}" ]; then parts=$(awk -v a="$parts" -v r="$ref" -v m="${ms[$v]}" 'BEGIN { printf "%.4f", a + r - m }'); fi
done
echo "the single-part savings (P0-loads .. P4-state) add up to $parts ms of the full kernel's $ref ms: less"
echo "when some time is freed by no single removal (waits shared by several phases, the loop's own work),"
echo "more when the removed parts overlapped each other"
if [ -n "${ms[full-again]:-}" ]; then
  echo "noise: the two runs of full are $(awk -v a="${ms[full]}" -v b="${ms[full-again]}" \
    'BEGIN { d = a - b; printf "%.4f", d < 0 ? -d : d }') ms apart"
fi
echo
echo "removed (outputs kept defined; see the header of $0):"
for v in "${variants[@]}"; do printf '  %-12s %s\n' "$v" "${what[$v]}"; done
echo "delta_prefill_phases: done in $((SECONDS - t_start)) s; logs in $work"
exit $failed
