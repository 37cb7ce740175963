// delta_rule_prefill_wgmma_t.cu: the gated delta rule's prefill in two kernels, every chunk's T and
// P first, then the recurrence with the state transposed (see delta_rule_prefill_wgmma_t.h for the
// design, the arithmetic and the contract). Built for sm_90a only (the sg_kernels_sm90a library).
//
// The recurrence, per chunk, in each of the two warpgroups (warpgroup w: value columns
// vc = 64 w .. vc + 63; accumulators are [64 value columns x N] with the value column as the row):
//   X^T = S^T K^T, O^T = S^T Q^T          A: S^T's bf16 parts (registers), B: the k / q tile (K-major)
//   X'^T = beta (v^T - exp(G) X^T)        v^T read by ldmatrix.trans; non-finite as 0, first one noted
//   V'^T = X'^T T^T                       B: T's parts (the record, K-major)
//   S^T = exp(G_last) S^T + (L V')^T K    B: the k tile, MN-major
//   o^T = exp(G) scale O^T + V'^T P^T     B: P's parts (the record, K-major); stored (bf16: through
//                                         the warpgroup's shared tile), NaN past the first
//                                         non-finite V' of each value column
// The two warpgroups take turns to issue each of the three groups (wgmma::Turns), so that the
// element-wise work of one runs under the other's products; the order of each warpgroup's own
// products, and so every byte, is unchanged.
// A row's first non-finite token is the minimum over the four lanes of a quad (a row's 64 tokens
// are theirs), so no shared memory and no barrier serves it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/contracts.h"
#include "kernels/delta_rule_chunk_io.cuh"
#include "kernels/delta_rule_prefill_wgmma.h"
#include "kernels/delta_rule_prefill_wgmma_t.h"
#include "kernels/delta_rule_records.h"
#include "kernels/delta_rule_wgmma_chunk.cuh"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"
#include "kernels/wgmma_util.cuh"

namespace sg {
namespace {

using mma::cp_async16;
using mma::smem_addr;
using wgmma::desc;
using namespace wgmma_chunk;  // kC, kD, kLDT, the tile sizes, at, load_tile, put_parts, Gates, chunk_t

// A chunk record (delta_rule_records.h): the lower core matrices of T's and P's bf16 parts, then the
// gates.
namespace rec = delta_records;
constexpr uint32_t kRec = rec::kRecordBytes;  // 19,712 bytes
static_assert(rec::kGateBytes == kGB, "the record's gates are the chunk's");
constexpr int kThreads = 256;  // two warpgroups: value columns 0 .. 63 and 64 .. 127
constexpr int kBarOut = 4;     // named barriers 4 and 5: a warpgroup's output tile written (Turns: 2, 3)
// A stage of the recurrence's double buffer (chunk ci uses stage ci % 2): the q, k, v tiles, T's and
// P's parts as whole [64 x 64] tiles (hi, then lo kTP on; the upper core matrices zeroed once), the gates.
constexpr uint32_t sQ = 0, sK = kQK, sV = 2 * kQK, sT = 3 * kQK, sP = sT + 2 * kTP, sG = sP + 2 * kTP;
constexpr uint32_t kStage = sG + kGB;
// Each warpgroup's output tile, [64 tokens x 64 value columns] bf16: a chunk's o goes through it to
// 16-byte stores of whole 128-byte rows (a warp's 8 lanes a token), 5% of the kernel's time
// against a thread's 32 scattered 2-byte stores (docs/BENCHMARKS.md).
constexpr uint32_t sO = 2 * kStage, kOutTile = 64 * 64 * 2;
constexpr uint32_t kSmem = sO + 2 * kOutTile;
static_assert(kSmem <= 227 * 1024, "fits one block's shared memory on sm_90");
static_assert(kSmem == delta_rule_prefill_wgmma_t_smem(),
              "the bytes the model plans with (delta_rule_prefill_shapes.h)");
static_assert(kRec == delta_rule_prefill_wgmma_t_record(), "the record of the workspace the model plans");
static_assert(kQK <= kTB, "the q tile fits the T kernel's A / T tile");
static_assert(kRec % 16 == 0 && kStage % 16 == 0 && kGB % 16 == 0, "16-byte copies");
static_assert(rec::kPartTile == kTP && sP == sT + 2 * kTP, "the stage's T and P part tiles as the records' layout");

// The T kernel's store of P's pair (r, c), (r, c + 1) (c even, in a lower core matrix) into the
// record's P parts.
__device__ __forceinline__ void store_p_pair(unsigned char* record, int r, int c, float x, float y) {
  uint32_t w[2];
  mma::split_pair<2>(x, y, w);
  *reinterpret_cast<uint32_t*>(record + rec::record_element_offset(2, r, c)) = w[0];
  *reinterpret_cast<uint32_t*>(record + rec::record_element_offset(3, r, c)) = w[1];
}

// The first record of sequence n starting at token b: records are b / 64 + n + ci (header).
__device__ __forceinline__ int64_t first_record(int64_t b, int n) { return b / kC + n; }

// One chunk's T, P and gates a warpgroup, kVH v-heads of one k head a block (warpgroup w: v-head
// kVH (b % (Hv / kVH)) + w of record b / (Hv / kVH), so that blocks of one k head, which read the
// same tiles, run side by side): the q and k tiles are copied once for the block's v-heads (two
// where a k head has an even number of v-heads: 52.5 KB, four 256-thread blocks an SM, 32 warps
// against 24 with one v-head a block of 35 KB; 17% less time on an H100, docs/BENCHMARKS.md). P =
// Q K^T (scaled, decayed, masked: mask_p) goes from registers to the record; T (chunk_t, the
// one-kernel form's code, under the warpgroup's own named barrier kBarAux + w) through the
// warpgroup's f32 tile, warpgroup 0's holding the q tile until every P product has read it. Record
// idx of a head belongs to the last sequence n < *n_seqs with first_record(n) <= idx
// (first_record grows by at least the sequence's chunk count from one sequence to the next), chunk
// idx - first_record(n); records past a sequence's chunks, of padding sequences or past the live
// ones are not written (the exits depend on the record only: uniform over the block).
template <int kVH>
struct ChunkT {  // the T kernel's shared memory: the k tile, each warpgroup's A / T tile, its gates
  static constexpr uint32_t kK = 0, kT = kQK, kG = kT + kVH * kTB, kSmemBytes = kG + kVH * kGB;
};
template <int kVH>
__global__ void __launch_bounds__(128 * kVH, kVH == 1 ? 6 : 4)  // 80 registers, six blocks an SM; pairs: 64, four
    delta_chunk_t_kernel(const DeltaRulePrefillParams p, unsigned char* ws) {
  using L_ = ChunkT<kVH>;  // the shared memory layout
  pdl_start();             // kernels/launch.cuh
  extern __shared__ __align__(128) unsigned char smem[];
  const int bpr = p.Hv / kVH;  // blocks a record
  const int64_t idx = blockIdx.x / bpr;
  const int wg = kVH == 1 ? 0 : static_cast<int>(threadIdx.x) >> 7, ai = static_cast<int>(threadIdx.x) & 127;
  const int lane = ai & 31;
  const int hv = static_cast<int>(blockIdx.x % bpr) * kVH + wg;
  const int bar = kBarAux + wg;  // the warpgroup's named barrier (T: chunk_t)
  const int ns = min(*p.n_seqs, p.max_seqs);
  if (ns <= 0) return;
  // The sequence: first_record(n) <= idx holds for a prefix of n = 0 .. ns - 1 (n = 0 always), so
  // each warp reads 32 sequences' starts at once and counts the prefix (one memory round trip for
  // up to 32 sequences, where a binary search takes five one after another).
  int n = 0;
  for (int base = 0; base < ns; base += 32) {  // warp-uniform
    const int i = base + lane;
    const bool in = i < ns && first_record(p.cu_seqlens[i], i) <= idx;
    const unsigned m = __ballot_sync(0xffffffffu, in);
    if (m != 0u) n = base + __popc(m) - 1;
    if (m != 0xffffffffu) break;
  }
  const int64_t b = p.cu_seqlens[n], e = p.cu_seqlens[n + 1];
  const int64_t c0 = b + (idx - first_record(b, n)) * kC;
  if (c0 >= e || p.slots[n] < 0) return;  // uniform over the block
  const int L = static_cast<int>(e - c0 < kC ? e - c0 : kC), hk = hv / (p.Hv / p.Hk);
  const uint32_t base = smem_addr(smem);
  load_tile(base + L_::kK, p.k, c0, L, p.Hk, hk, static_cast<int>(threadIdx.x), 128 * kVH);
  load_tile(base + L_::kT, p.q, c0, L, p.Hk, hk, static_cast<int>(threadIdx.x), 128 * kVH);
  mma::cp_async_commit();
  const Gates gt = gates_in(smem + L_::kG + wg * kGB);
  if (ai < 32) chunk_io::chunk_gates(p, c0, L, hv, lane, gt.G, gt.E, gt.L, gt.B);
  mma::cp_async_wait<0>();
  wgmma::fence_proxy_async();
  __syncthreads();  // k and q tiles, gates
  unsigned char* record = ws + (idx * p.Hv + hv) * static_cast<int64_t>(kRec);
  {  // P = Q K^T, as the one-kernel form's state warpgroups compute it, into the record's P parts.
    float pa[32];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      wgmma::m64n64k16_ss(pa, desc(base + L_::kT + 256 * kk, 128, 2048), desc(base + L_::kK + 256 * kk, 128, 2048),
                          kk > 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands<32>(pa);
    const int r0 = 16 * (ai >> 5) + ((ai & 31) >> 2), t = ai & 3;
    mask_p(pa, gt, 1.0f / sqrtf(static_cast<float>(kD)), r0, t);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h, c = 8 * j + 2 * t;
        if ((c >> 3) <= (r >> 3)) store_p_pair(record, r, c, pa[4 * j + 2 * h], pa[4 * j + 2 * h + 1]);
      }
    }
  }
  __syncthreads();  // every warpgroup's P product has read the q tile
  float* Ts = reinterpret_cast<float*>(smem + L_::kT + wg * kTB);
  chunk_t(base + L_::kK, gt, Ts, ai, 0, bar);
  bar_sync(bar, 128);  // T's parts written by every thread of the warpgroup
  // T's lower core matrices, then the gates, into the record (16-byte chunks).
  const unsigned char* tt = reinterpret_cast<const unsigned char*>(Ts);
  for (int i = ai; i < static_cast<int>(2 * rec::kRecPart / 16); i += 128) {
    *reinterpret_cast<uint4*>(record + 16 * i) = *reinterpret_cast<const uint4*>(tt + rec::record_chunk_tile_offset(i));
  }
  for (int i = ai; i < static_cast<int>(kGB / 16); i += 128) {
    *reinterpret_cast<uint4*>(record + rec::kRecGates + 16 * i) =
        *reinterpret_cast<const uint4*>(smem + L_::kG + wg * kGB + 16 * i);
  }
}

// The T kernel's v-heads a block: two where each k head has an even number of them, else one
// (delta_rule_prefill_shapes.h).
constexpr bool chunk_t_pairs(int Hk, int Hv) { return delta_rule_prefill_wgmma_t_chunk_heads(Hk, Hv) == 2; }
static_assert(ChunkT<1>::kSmemBytes == delta_rule_prefill_wgmma_t_chunk_smem(1, 1) &&
                  ChunkT<2>::kSmemBytes == delta_rule_prefill_wgmma_t_chunk_smem(1, 2),
              "the bytes the model plans with (delta_rule_prefill_shapes.h)");

// Launches the T kernel of kVH v-heads a block over `records` chunk records of every v-head.
template <int kVH>
cudaError_t launch_chunk_t_of(const DeltaRulePrefillParams& p, unsigned char* ws, int64_t records,
                              cudaStream_t stream) {
  constexpr uint32_t smem = ChunkT<kVH>::kSmemBytes;
  if (const cudaError_t e = dev::allow_dynamic_smem(delta_chunk_t_kernel<kVH>, smem); e != cudaSuccess) return e;
  launch_kernel(delta_chunk_t_kernel<kVH>, dim3(static_cast<unsigned>(records * p.Hv / kVH)), dim3(128 * kVH), smem,
                stream, p, ws);
  return cudaGetLastError();
}
cudaError_t launch_chunk_t(const DeltaRulePrefillParams& p, unsigned char* ws, int64_t records, cudaStream_t stream) {
  return chunk_t_pairs(p.Hk, p.Hv) ? launch_chunk_t_of<2>(p, ws, records, stream)
                                   : launch_chunk_t_of<1>(p, ws, records, stream);
}

// The min of v over the four lanes of a quad (the lanes that hold one accumulator row).
__device__ __forceinline__ int quad_min(int v) {
  v = min(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return min(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

// Grid (Hv, max_seqs), block 256, kSmem bytes of dynamic shared memory. Every early exit depends on
// the sequence only (uniform over the block), so every barrier sees every thread.
__global__ void __launch_bounds__(kThreads, 1)
    delta_rule_wgmma_t_kernel(const DeltaRulePrefillParams p, const unsigned char* ws, int64_t records) {
  pdl_start();
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t base = smem_addr(smem);
  const int Hv = p.Hv, Hk = p.Hk;
  const int hv = blockIdx.x, n = blockIdx.y;
  if (n >= *p.n_seqs) return;  // before reading cu_seqlens: it may hold only live + 1 entries
  const int64_t b = p.cu_seqlens[n], e = p.cu_seqlens[n + 1];
  if (e <= b) return;  // zero-length: no output, no state access
  const int slot = p.slots[n];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int g = lane >> 2, t = lane & 3;
  const int nchunks = static_cast<int>((e - b + kC - 1) / kC);
  const int64_t first = first_record(b, n);
  if (slot < 0 || first + nchunks > records) {  // padding: zero rows; records past the workspace: NaN rows
    fill_rows(p, b, e, hv, slot < 0 ? 0.0f : __int_as_float(0x7fc00000), tid, kThreads, false);
    return;
  }
  const int hk = hv / (Hv / Hk);
  const bool hist = p.has_history[n] != 0;
  const float scale = 1.0f / sqrtf(static_cast<float>(kD));
  const int r0 = 16 * (warp & 3) + g;  // this thread's accumulator rows: value columns vc + r0, vc + r0 + 8
  const int vc = 64 * wg;
  // bf16 outputs on a 16-byte aligned base go through the warpgroup's output tile (the contract
  // asks only the element's alignment of out: other bases take the element stores).
  const bool tile_out = p.out_dtype == DType::bf16 && (reinterpret_cast<uintptr_t>(p.out) & 15) == 0;

  // The state: st[4 j + q] = S^T[vc + r0 + 8 (q >> 1)][8 j + 2 t + (q & 1)] = S[d][v], j = 0 .. 15,
  // read once; two m64n64 halves (d < 64, d >= 64) of one m64n128 accumulator.
  const int64_t state_at = (static_cast<int64_t>(slot) * Hv + hv) * kD * kD;
  float st[64];
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int v = vc + r0 + 8 * (q >> 1), d = 8 * j + 2 * t + (q & 1);
      st[4 * j + q] = hist ? dev::load(p.state, p.state_dtype, state_at + static_cast<int64_t>(d) * kD + v) : 0.0f;
    }
  }
  // The upper core matrices of both stages' T and P part tiles: zero once (the copies below never
  // write them; the first chunk's fence and barrier make them visible to wgmma).
  constexpr int kUpperChunks = rec::kParts * rec::kUpper * 8;
  for (int i = tid; i < 2 * kUpperChunks; i += kThreads) {
    *reinterpret_cast<uint4*>(smem + (i / kUpperChunks) * kStage + sT +
                              rec::upper_chunk_tile_offset(i % kUpperChunks)) = make_uint4(0, 0, 0, 0);
  }
  // Chunk ci's tiles and record into stage ci % 2, by the 256 threads (one cp.async group, committed
  // by load_rest): the q and k tiles, then the v tile, the record's lower core matrices of T's and P's
  // parts to their places in the whole tiles, and the gates. A chunk issues the next chunk's q and k
  // after its X and O products and the rest after V': every copy issued there, ahead of the v tile's
  // ldmatrix reads for X', delays them (the next chunk's copies all there: 1% slower; all after V':
  // 3%; after the state update: 8%, docs/BENCHMARKS.md).
  auto load_qk = [&](int ci) {
    const int64_t c0 = b + static_cast<int64_t>(ci) * kC;
    const int L = static_cast<int>(e - c0 < kC ? e - c0 : kC);
    const uint32_t s = base + (ci & 1) * kStage;
    load_tile(s + sQ, p.q, c0, L, Hk, hk, tid, kThreads);
    load_tile(s + sK, p.k, c0, L, Hk, hk, tid, kThreads);
  };
  auto load_rest = [&](int ci) {
    const int64_t c0 = b + static_cast<int64_t>(ci) * kC;
    const int L = static_cast<int>(e - c0 < kC ? e - c0 : kC);
    const uint32_t s = base + (ci & 1) * kStage;
    load_tile(s + sV, p.v, c0, L, Hv, hv, tid, kThreads);
    const unsigned char* record = ws + ((first + ci) * Hv + hv) * static_cast<int64_t>(kRec);
    for (int i = tid; i < static_cast<int>(rec::kRecGates / 16); i += kThreads) {
      cp_async16(s + sT + rec::record_chunk_tile_offset(i), record + 16 * i, true);
    }
    for (int i = tid; i < static_cast<int>(kGB / 16); i += kThreads) {
      cp_async16(s + sG + 16 * i, record + rec::kRecGates + 16 * i, true);
    }
    mma::cp_async_commit();
  };

  load_qk(0);
  load_rest(0);
  const wgmma::Turns<2> turns{wg};  // named barriers 2 and 3 (the header says why)
  if (wg == 1) turns.pass();        // warpgroup 0 issues first

  for (int ci = 0; ci < nchunks; ++ci) {
    const int64_t c0 = b + static_cast<int64_t>(ci) * kC;
    const int L = static_cast<int>(e - c0 < kC ? e - c0 : kC);  // tokens in this chunk, 1..64
    const uint32_t s = base + (ci & 1) * kStage;
    const Gates gt = gates_in(smem + (ci & 1) * kStage + sG);
    mma::cp_async_wait<0>();
    wgmma::fence_proxy_async();
    __syncthreads();  // stage ci complete for both warpgroups; chunk ci - 1 is done with the other stage

    // ---- X^T = S^T K^T (first group) and O^T = S^T Q^T (second), S^T's parts as the A operand.
    uint32_t sf[8][2][4];
#pragma unroll
    for (int kk = 0; kk < 8; ++kk) acc_fragments(st + 32 * (kk >> 2), kk & 3, sf[kk]);
    // Each product in the one-kernel form's order (its S parts outer, k-steps inner; V' and o below:
    // hi*hi, then the low part of its first operand, then of T or P), so that each output element
    // sums the same exact products in the same order.
    float xa[32], oa[32];
    turns.wait();
    wgmma::fence();
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {  // K-major k and q: a 16-feature k-step is two core matrices, 256 bytes on
        wgmma::m64n64k16_rs_t<0>(xa, sf[kk][i], desc(s + sK + 256 * kk, 128, 2048), i + kk > 0);
      }
    }
    wgmma::commit();
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        wgmma::m64n64k16_rs_t<0>(oa, sf[kk][i], desc(s + sQ + 256 * kk, 128, 2048), i + kk > 0);
      }
    }
    wgmma::commit();
    turns.pass();
    if (ci + 1 < nchunks) load_qk(ci + 1);
    wgmma::wait<1>();
    wgmma::fence_operands<32>(xa);
    // X'^T[v][c] = beta_c (v[c][v] - exp(G_c) X^T[v][c]), non-finite as 0; v^T's fragments by
    // ldmatrix.trans: matrix m of x4 holds tokens 8 (2 jj + m / 2) .., value columns vc + r0 - g +
    // 8 (m % 2) .., so register m is the pair of xa[4 j + 2 h], j = 2 jj + m / 2, h = m % 2.
    int nfx[2] = {kC, kC};  // the first token with a non-finite X' in rows r0, r0 + 8
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      uint32_t vr[4];
      const int m = lane >> 3;
      mma::ldmatrix_x4_trans(vr,
                             s + sV + at<kD>(8 * (2 * jj + (m >> 1)) + (lane & 7), vc + 16 * (warp & 3) + 8 * (m & 1)));
#pragma unroll
      for (int u = 0; u < 2; ++u) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int j = 2 * jj + u, c = 8 * j + 2 * t, i = 4 * j + 2 * h;
          const uint32_t w = vr[2 * u + h];
          float x0 = gt.B[c] * (__uint_as_float(w << 16) - gt.E[c] * xa[i]);
          float x1 = gt.B[c + 1] * (__uint_as_float(w & 0xffff0000u) - gt.E[c + 1] * xa[i + 1]);
          if (!isfinite(x0)) {
            nfx[h] = min(nfx[h], c);
            x0 = 0.0f;
          }
          if (!isfinite(x1)) {
            nfx[h] = min(nfx[h], c + 1);
            x1 = 0.0f;
          }
          xa[i] = x0;
          xa[i + 1] = x1;
        }
      }
    }
    nfx[0] = quad_min(nfx[0]);
    nfx[1] = quad_min(nfx[1]);
    uint32_t xf[4][2][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) acc_fragments(xa, kk, xf[kk]);
    wgmma::wait<0>();  // O^T too: S^T's parts are free
    wgmma::fence_operands<32>(oa);

    // ---- V'^T = X'^T T^T (from zero, as the one-kernel form's).
    float va[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) va[i] = 0.0f;
    wgmma::fence_operands<32>(va);
    turns.wait();
    wgmma::fence();
    split_product(va, xf, s + sT);  // T's parts, K-major
    wgmma::commit();
    if (ci + 1 < nchunks) load_rest(ci + 1);
    turns.pass();
    wgmma::wait<0>();
    wgmma::fence_operands<32>(va);
    // V'^T: value columns at or past their first non-finite X' are NaN, as the plain product
    // would be; each row's first non-finite V' token.
    int nfv[2] = {kC, kC};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int h = (i >> 1) & 1, c = 8 * (i >> 2) + 2 * t + (i & 1);
      va[i] = nfx[h] <= c ? __int_as_float(0x7fc00000) : va[i];
      if (!isfinite(va[i])) nfv[h] = min(nfv[h], c);
    }
    nfv[0] = quad_min(nfv[0]);
    nfv[1] = quad_min(nfv[1]);

    // ---- S^T = exp(G_last) S^T + (L V')^T K (L V' as it is: the state takes non-finite values, as
    // in the scan); then o^T = exp(G) scale O^T + V'^T P^T (V' with non-finite values as 0).
    uint32_t lf[4][2][4], vf[4][2][4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      fragments_of(kk, lf[kk], [&](int i) { return gt.L[8 * (i >> 2) + 2 * t + (i & 1)] * va[i]; });
    }
    const float decay = gt.E[kC - 1];
#pragma unroll
    for (int i = 0; i < 64; ++i) st[i] *= decay;
    wgmma::fence_operands<64>(st);
    turns.wait();
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      // k MN-major: a 16-token k-step is two row groups, 2 x 2048 bytes on; 16 feature chunks 128 apart.
      const uint64_t kt = desc(s + sK + 4096 * kk, 2048, 128);
      wgmma::m64n128k16_rs_tb(st, lf[kk][0], kt);
      wgmma::m64n128k16_rs_tb(st, lf[kk][1], kt);
    }
    wgmma::commit();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      fragments_of(kk, vf[kk], [&](int i) { return isfinite(va[i]) ? va[i] : 0.0f; });
    }
#pragma unroll
    for (int i = 0; i < 32; ++i) oa[i] *= gt.E[8 * (i >> 2) + 2 * t + (i & 1)] * scale;
    wgmma::fence_operands<32>(oa);
    wgmma::fence();
    split_product(oa, vf, s + sP);  // P's parts (the chunk's record), K-major as T's
    wgmma::commit();
    turns.pass();
    wgmma::wait<0>();
    wgmma::fence_operands<64>(st);
    wgmma::fence_operands<32>(oa);
    if (tile_out) {
      // The warpgroup's tile (delta_rule_records.h: token c's row, chunks swizzled by c % 8), then a
      // thread's 4 whole chunks to memory. The chunk's next barrier (__syncthreads) orders these
      // reads before the next chunk's writes.
      unsigned char* tile = smem + sO + wg * kOutTile;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int h = (i >> 1) & 1, c = 8 * (i >> 2) + 2 * t + (i & 1), v = r0 + 8 * h;
        const float x = nfv[h] <= c ? __int_as_float(0x7fc00000) : oa[i];
        *reinterpret_cast<__nv_bfloat16*>(tile + rec::out_tile_element_offset(c, v)) = __float2bfloat16_rn(x);
      }
      bar_sync(kBarOut + wg, 128);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int u = (tid & 127) + 128 * k, c = u >> 3, q = u & 7;
        if (c < L) {
          *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.out) + ((c0 + c) * Hv + hv) * kD + vc + 8 * q) =
              *reinterpret_cast<const uint4*>(tile + rec::out_tile_chunk_offset(c, q));
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int h = (i >> 1) & 1, c = 8 * (i >> 2) + 2 * t + (i & 1);
        if (c < L) {
          const float x = nfv[h] <= c ? __int_as_float(0x7fc00000) : oa[i];
          dev::store(p.out, p.out_dtype, ((c0 + c) * Hv + hv) * kD + vc + r0 + 8 * h, x);
        }
      }
    }
  }

  // Warpgroup 1's last pass met; then the final state, written once.
  if (wg == 0) turns.wait();
#pragma unroll
  for (int j = 0; j < 16; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int v = vc + r0 + 8 * (q >> 1), d = 8 * j + 2 * t + (q & 1);
      dev::store(p.state, p.state_dtype, state_at + static_cast<int64_t>(d) * kD + v, st[4 * j + q]);
    }
  }
}

using rec::record_count;

}  // namespace

cudaError_t delta_rule_prefill_wgmma_t(const DeltaRulePrefillParams& p, void* workspace, size_t workspace_bytes,
                                       int max_tokens, cudaStream_t stream) {
  LaunchCheck chk("delta_rule.prefill (wgmma-t)");
  check_delta_rule_prefill_params(chk, p);
  chk.require(delta_rule_prefill_wgmma_supports(p.Dk, p.Dv, p.qkv_dtype),
              "the form is built for bf16 q, k, v with Dk = Dv = 128");
  chk.require(p.norm_w == nullptr, "a fused output norm (norm_w) is built only in the mma form");
  chk.require(dev::aligned16(p.q) && dev::aligned16(p.k) && dev::aligned16(p.v), "q, k and v must be 16-byte aligned");
  chk.in_range(max_tokens, 0, INT32_MAX, "max_tokens");
  chk.require(record_count(max_tokens, p.max_seqs) * p.Hv <= INT32_MAX, "too many chunk records for one grid");
  const size_t need = delta_rule_prefill_wgmma_t_workspace(max_tokens, p.max_seqs, p.Hv);
  chk.require(need == 0 || (workspace != nullptr && dev::aligned16(workspace)),
              "the workspace must be set and 16-byte aligned");
  chk.require(workspace_bytes >= need, "the workspace is smaller than delta_rule_prefill_wgmma_t_workspace()");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (const cudaError_t err = dev::require_sm90a(chk); err != cudaSuccess) return err;
  if (p.max_seqs == 0) return cudaSuccess;
  if (const cudaError_t e = dev::allow_dynamic_smem(delta_rule_wgmma_t_kernel, kSmem); e != cudaSuccess) return e;
  const int64_t records = record_count(max_tokens, p.max_seqs);
  auto* ws = static_cast<unsigned char*>(workspace);
  if (const cudaError_t e = launch_chunk_t(p, ws, records, stream); e != cudaSuccess) return e;
  launch_kernel(delta_rule_wgmma_t_kernel, dim3(static_cast<unsigned>(p.Hv), static_cast<unsigned>(p.max_seqs)),
                dim3(kThreads), kSmem, stream, p, static_cast<const unsigned char*>(ws), records);
  return cudaGetLastError();
}

}  // namespace sg
