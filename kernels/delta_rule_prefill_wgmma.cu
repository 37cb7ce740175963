// delta_rule_prefill_wgmma.cu: the gated delta rule's prefill in the chunked WY form on the sm_90a
// warpgroup tensor cores (see delta_rule_prefill_wgmma.h for the design, the arithmetic and the
// contract; delta_rule_prefill_mma.cu is the mma.sync form it follows product by product). Built
// for sm_90a only (the sg_kernels_sm90a library).
// One block per (v-head, sequence) walks the sequence's chunks of 64 tokens. Warpgroup 2, one
// chunk ahead (aux_warpgroup): the chunk's k tile, gates, A = K K^T (wgmma, masked) and
// T = (I + A)^-1 on the CUDA cores (delta_rule_chunk_inverse.cuh: four 16 x 16 diagonal blocks by
// substitution, a warp each, then the 32 x 32 and 64 x 64 merges), then T's bf16 parts, into buffer
// chunk % 2, then "ready". Warpgroups 0 and 1 (warpgroup w owns value columns 64w .. 64w + 63),
// per chunk once it is ready:
//   P1 P = Q K^T -> registers (scale, decay, mask, then split: the A operand of P V'); O = Q S_w
//      and X = K S_w with S_w's bf16 parts from shared memory; X = beta (v - exp(G) X) -> its part
//      tiles (non-finite values as 0, the first non-finite row of each column noted)
//   (the next chunk's q and v are copied while the rest of this chunk runs)
//   P3 V' = T X (T's parts from shared memory); rows at or past a column's first
//      non-finite X made NaN; V' (non-finite as 0) and exp(G_last - G) V' -> their part tiles
//   P4 o = O + P V' (stored, rows past V''s first non-finite value NaN);
//      S_w = exp(G_last) S_w + K^T (exp(G_last - G) V') (K read MN-major); the chunk's buffer is
//      released; S_w -> its part tiles
// Shared-memory tiles are bf16 in the unswizzled core-matrix layout of wgmma_util.cuh: chunk (row r,
// 16-byte column c) of a tile with C columns at (r / 8) C 16 + c 128 + (r % 8) 16.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/contracts.h"
#include "kernels/delta_rule_chunk_io.cuh"
#include "kernels/delta_rule_prefill_wgmma.h"
#include "kernels/delta_rule_wgmma_chunk.cuh"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"
#include "kernels/wgmma_util.cuh"

// Timeline points for tools/probes/delta_prefill_probe.cu (-DSG_PROBE_TRACE records the SM clock
// at each point of one block, chunk by chunk; delta_rule_wgmma_chunk.cuh defines SG_DELTA_TRACE
// empty otherwise). A point just after a barrier may read the clock before the barrier has released
// the warp (the barrier's blocking is deferred to the next dependent instruction), so a wait shows
// in the phase after it.

namespace sg {
namespace {

using chunk_io::store2;
using mma::smem_addr;
using wgmma::desc;
using namespace wgmma_chunk;  // kC, kD, kLDT, the tile sizes, at, load_tile, put_parts, Gates, chunk_t

constexpr int kThreads = 384;    // warpgroups 0 and 1: the state's products; 2: the chunk's T
constexpr uint32_t kSP = 16384;  // one part of a warpgroup's S [128 x 64]: row groups 1024 bytes apart
constexpr uint32_t kXP = 8192;   // one part of a warpgroup's X / V' or LV' [64 x 64]
// Byte offsets of the dynamic shared memory. The k tile, the A / T tile and the gates have two
// buffers (chunk n uses buffer n % 2): warpgroup 2 fills chunk n + 1's while 0 and 1 work on n.
constexpr uint32_t oQ = 0, oV = oQ + kQK, oK = oV + kQK;  // q, v; k in two buffers
constexpr uint32_t oS = oK + 2 * kQK;  // S parts: warpgroup w part i at (2 w + i) kSP; LV' parts (P3-P4)
                                       // in the first 2 kXP bytes of the warpgroup's S region
constexpr uint32_t oX = oS + 4 * kSP;  // X, then V' (non-finite as 0): parts as S's
constexpr uint32_t oT = oX + 4 * kXP;  // A, then T: f32 [64, kLDT], two buffers
constexpr uint32_t oG = oT + 2 * kTB;  // the gates, two buffers
constexpr uint32_t oN = oG + 2 * kGB;  // int [256]: first non-finite row of X, of V' per column
constexpr uint32_t kSmem = oN + 2 * kD * 4;
// Named barriers (0 is __syncthreads, unused): 1, 2 a state warpgroup's own; 3 both state
// warpgroups; 4 + b chunk ready in buffer b (warpgroup 2 arrives, 0 and 1 wait); 6 + b buffer b
// free again (0 and 1 arrive, 2 waits); 8 (kBarAux) warpgroup 2's own.
constexpr int kBarState = 3, kBarReady = 4, kBarFree = 6;
// Registers a thread after the warpgroups' setmaxnreg: the block holds 168 x 384 (the launch
// bound's), so 2 x 200 + 104 = 504 = 3 x 168 (a larger sum would leave setmaxnreg.inc waiting
// forever). Warpgroup 2's chain is as long as the state warpgroups' (its substitutions and products
// are latency-bound), and the split decides how fast both run: of the splits measured on the H200
// (224 / 56 to 192 / 120), 200 / 104 is the fastest with this code (docs/BENCHMARKS.md).
constexpr int kStateRegs = 200, kAuxRegs = 104;
static_assert(2 * kStateRegs + kAuxRegs == 3 * (65536 / kThreads / 8 * 8), "the registers the block holds");
static_assert(kSmem <= 227 * 1024, "fits one block's shared memory on sm_90");
static_assert(kSmem == delta_rule_prefill_wgmma_smem(), "the bytes the model plans with (delta_rule_prefill_shapes.h)");
static_assert(2 * kXP <= kSP, "LV' parts fit the S region's first part");
static_assert(oT % 16 == 0 && oG % 16 == 0, "aligned views");

__device__ __forceinline__ float2 load_pair(const void* s, DType t, int64_t i) {
  if (t == DType::bf16) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(s) + i);
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  }
  return *reinterpret_cast<const float2*>(static_cast<const float*>(s) + i);
}

__device__ __forceinline__ void wg_barrier(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory"); }

__device__ __forceinline__ Gates gates_at(unsigned char* smem, int b) { return gates_in(smem + oG + b * kGB); }

// Warpgroup 2, chunk by chunk one ahead of the state warpgroups: the chunk's k tile (cp.async),
// its gates, then its T (chunk_t: A = K K^T, T = (I + A)^-1 and T's parts) into buffer n % 2; then
// it signals the chunk ready. From chunk 2 on it first waits until chunk n - 2 has released the
// buffer.
__device__ __forceinline__ void aux_warpgroup(const DeltaRulePrefillParams& p, unsigned char* smem, uint32_t base,
                                              int64_t b, int64_t e, int hv, int hk) {
  const int ai = threadIdx.x - 256, lane = ai & 31;  // ai: 0 .. 127
  int n = 0;
  for (int64_t c0 = b; c0 < e; c0 += kC, ++n) {
    const int L = static_cast<int>(e - c0 < kC ? e - c0 : kC), buf = n & 1;
    SG_DELTA_TRACE(0, n);
    if (n >= 2) bar_sync(kBarFree + buf, kThreads);  // chunk n - 2 is done with buffer buf
    const uint32_t aK = base + oK + buf * kQK;
    load_tile(aK, p.k, c0, L, p.Hk, hk, ai, 128);
    mma::cp_async_commit();
    const Gates gt = gates_at(smem, buf);
    if (ai < 32) chunk_io::chunk_gates(p, c0, L, hv, lane, gt.G, gt.E, gt.L, gt.B);
    mma::cp_async_wait<0>();
    wgmma::fence_proxy_async();
    bar_sync(kBarAux, 128);  // k tile and gates
    SG_DELTA_TRACE(1, n);
    chunk_t(aK, gt, reinterpret_cast<float*>(smem + oT + buf * kTB), ai, n);
    __threadfence_block();  // T's parts before the arrival
    SG_DELTA_TRACE(4, n);
    bar_arrive(kBarReady + buf, kThreads);  // k, gates and T of chunk n
  }
}

// Grid (Hv, max_seqs), block 384, kSmem bytes of dynamic shared memory. Every early exit depends on
// the sequence only (uniform over the block), so every barrier sees every thread it counts.
__global__ void __launch_bounds__(kThreads, 1) delta_rule_wgmma_kernel(const DeltaRulePrefillParams p) {
  pdl_start();  // kernels/launch.cuh
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t base = smem_addr(smem);
  int* const nfX = reinterpret_cast<int*>(smem + oN);  // [128] first row with a non-finite X
  int* const nfV = nfX + kD;                           // [128] first row with a non-finite V'

  const int Hv = p.Hv, Hk = p.Hk;
  const int hv = blockIdx.x, n = blockIdx.y;
  if (n >= *p.n_seqs) return;  // before reading cu_seqlens: it may hold only live + 1 entries
  const int64_t b = p.cu_seqlens[n], e = p.cu_seqlens[n + 1];
  if (e <= b) return;  // zero-length: no output, no state access
  const int slot = p.slots[n];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wg = warp >> 2;
  const int g = lane >> 2, t = lane & 3;
  if (slot < 0) {  // padding: zero output rows, state untouched
    fill_rows(p, b, e, hv, 0.0f, tid, kThreads, true);
    return;
  }
  const int hk = hv / (Hv / Hk);
  if (wg == 2) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kAuxRegs));
    aux_warpgroup(p, smem, base, b, e, hv, hk);
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kStateRegs));
  const bool hist = p.has_history[n] != 0;
  const float scale = 1.0f / sqrtf(static_cast<float>(kD));
  const int r0 = 16 * (warp & 3) + g;  // this thread's accumulator rows: r0 and r0 + 8
  const int vc = 64 * wg;              // the warpgroup's first value column
  unsigned char* const sS[2] = {smem + oS + 2 * wg * kSP, smem + oS + (2 * wg + 1) * kSP};
  unsigned char* const sX[2] = {smem + oX + 2 * wg * kXP, smem + oX + (2 * wg + 1) * kXP};
  unsigned char* const sLV[2] = {sS[0], sS[0] + kXP};  // inside S's first part (free from P1 to put_state)
  const uint32_t aS = base + oS + 2 * wg * kSP, aX = base + oX + 2 * wg * kXP, aLV = aS;

  // The state: st[mi][4 j + q] = S[64 mi + r0 + 8 (q >> 1)][vc + 8 j + 2 t + (q & 1)], read once.
  const int64_t state_at = (static_cast<int64_t>(slot) * Hv + hv) * kD * kD;
  float st[2][32];
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 64 * mi + r0 + 8 * h, c = vc + 8 * j + 2 * t;
        const float2 s = hist ? load_pair(p.state, p.state_dtype, state_at + i * kD + c) : make_float2(0.0f, 0.0f);
        st[mi][4 * j + 2 * h] = s.x;
        st[mi][4 * j + 2 * h + 1] = s.y;
      }
    }
  }
  // S_w's parts for the products of the next chunk (after wgmma has read them, or at the start).
  auto put_state = [&] {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          put_parts<64>(sS[0], sS[1], 64 * mi + r0 + 8 * h, 8 * j + 2 * t, st[mi][4 * j + 2 * h],
                        st[mi][4 * j + 2 * h + 1]);
        }
      }
    }
    wgmma::fence_proxy_async();
  };
  auto load_qv = [&](int64_t c0) {  // the chunk's q and v tiles, by the 256 state threads
    const int L = static_cast<int>(e - c0 < kC ? e - c0 : kC);
    load_tile(base + oQ, p.q, c0, L, Hk, hk, tid, 256);
    load_tile(base + oV, p.v, c0, L, Hv, hv, tid, 256);
    mma::cp_async_commit();
  };
  load_qv(b);
  put_state();

  const int nchunks = static_cast<int>((e - b + kC - 1) / kC);
  for (int ci = 0; ci < nchunks; ++ci) {
    const int64_t c0 = b + static_cast<int64_t>(ci) * kC;
    const int L = static_cast<int>(e - c0 < kC ? e - c0 : kC);  // tokens in this chunk, 1..64
    const int buf = ci & 1;
    const uint32_t aQ = base + oQ, aK = base + oK + buf * kQK;
    const Gates gt = gates_at(smem, buf);
    const uint32_t aT = base + oT + buf * kTB;  // T's bf16 parts (warpgroup 2's t_parts)
    {  // this warpgroup's columns of nfX and nfV (their last reads are behind the previous chunk's warpgroup barrier)
      const int i = tid & 127;
      (i < 64 ? nfX : nfV)[vc + (i & 63)] = kC;
    }
    SG_DELTA_TRACE(5, ci);
    bar_sync(kBarReady + buf, kThreads);  // warpgroup 2: the chunk's k tile, gates and T
    mma::cp_async_wait<0>();
    wgmma::fence_proxy_async();
    bar_sync(kBarState, 256);  // q, v of both warpgroups' copies, S parts, nf resets
    SG_DELTA_TRACE(6, ci);

    // ---- P1: P (first group), O and X (second group).
    float pa[32], oa[32], xa[32];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {  // K-major q and k: a k-step is two core matrices, 256 bytes on
      wgmma::m64n64k16_ss(pa, desc(aQ + 256 * kk, 128, 2048), desc(aK + 256 * kk, 128, 2048), kk > 0);
    }
    wgmma::commit();
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {  // S MN-major: a k-step is two row groups, 2048 bytes on
        const uint64_t s = desc(aS + i * kSP + 2048 * kk, 1024, 128);
        wgmma::m64n64k16_ss_t<0, 1>(oa, desc(aQ + 256 * kk, 128, 2048), s, i + kk > 0);
        wgmma::m64n64k16_ss_t<0, 1>(xa, desc(aK + 256 * kk, 128, 2048), s, i + kk > 0);
      }
    }
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operands<32>(pa);
    // P: scaled and decayed, exact zeros above the diagonal, then split into the register A
    // operand of P V'.
    uint32_t pf[4][2][4];
    mask_p(pa, gt, scale, r0, t);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) acc_fragments(pa, kk, pf[kk]);
    wgmma::wait<0>();
    SG_DELTA_TRACE(7, ci);
    wgmma::fence_operands<32>(oa);
    wgmma::fence_operands<32>(xa);
    // O = exp(G_r) S^T q'_r; X = beta (v - exp(G) S^T k) into its part tiles, non-finite as 0.
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h, c = 8 * j + 2 * t;
        const float er = gt.E[r] * scale;
        oa[4 * j + 2 * h] *= er;
        oa[4 * j + 2 * h + 1] *= er;
        const uint32_t vw = *reinterpret_cast<const uint32_t*>(smem + oV + at<kD>(r, vc + c));
        const float v0 = __uint_as_float(vw << 16), v1 = __uint_as_float(vw & 0xffff0000u);
        float x0 = gt.B[r] * (v0 - gt.E[r] * xa[4 * j + 2 * h]), x1 = gt.B[r] * (v1 - gt.E[r] * xa[4 * j + 2 * h + 1]);
        if (!isfinite(x0)) {
          atomicMin(nfX + vc + c, r);
          x0 = 0.0f;
        }
        if (!isfinite(x1)) {
          atomicMin(nfX + vc + c + 1, r);
          x1 = 0.0f;
        }
        put_parts<64>(sX[0], sX[1], r, c, x0, x1);
      }
    }
    wgmma::fence_proxy_async();
    bar_sync(kBarState, 256);  // X parts and nfX written; both warpgroups have read q and v
    SG_DELTA_TRACE(8, ci);
    if (ci + 1 < nchunks) load_qv(c0 + kC);  // the next chunk's q and v, while this one runs

    // ---- P3: V' = T X, T's bf16 parts (exact zeros above the diagonal) from shared memory.
    float va[32];
    {
#pragma unroll
      for (int i = 0; i < 32; ++i) va[i] = 0.0f;
      wgmma::fence_operands<32>(va);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        // T K-major: a 16-token k-step is two core matrices, 256 bytes on; X MN-major: two row
        // groups, 2048 bytes on.
        const uint64_t th = desc(aT + 256 * kk, 128, 1024), tl = desc(aT + kTP + 256 * kk, 128, 1024);
        const uint64_t xh = desc(aX + 2048 * kk, 1024, 128), xl = desc(aX + kXP + 2048 * kk, 1024, 128);
        wgmma::m64n64k16_ss_t<0, 1>(va, th, xh, 1);
        wgmma::m64n64k16_ss_t<0, 1>(va, th, xl, 1);
        wgmma::m64n64k16_ss_t<0, 1>(va, tl, xh, 1);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands<32>(va);
    }
    wg_barrier(wg);  // every warp of the warpgroup is past T X: the X tiles are free
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h, c = 8 * j + 2 * t;
        float y[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          y[u] = nfX[vc + c + u] <= r ? __int_as_float(0x7fc00000) : va[4 * j + 2 * h + u];
          if (!isfinite(y[u])) atomicMin(nfV + vc + c + u, r);
        }
        put_parts<64>(sLV[0], sLV[1], r, c, gt.L[r] * y[0], gt.L[r] * y[1]);
        put_parts<64>(sX[0], sX[1], r, c, isfinite(y[0]) ? y[0] : 0.0f, isfinite(y[1]) ? y[1] : 0.0f);
      }
    }
    wgmma::fence_proxy_async();
    wg_barrier(wg);  // V' parts, LV' parts and nfV written
    SG_DELTA_TRACE(9, ci);

    // ---- P4: o = O + P V' and S_w = exp(G_last) S_w + K^T (LV').
    const float decay = gt.E[kC - 1];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int i = 0; i < 32; ++i) st[mi][i] *= decay;
    }
    wgmma::fence_operands<32>(oa);
    wgmma::fence_operands<32>(st[0]);
    wgmma::fence_operands<32>(st[1]);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t vh = desc(aX + 2048 * kk, 1024, 128), vl = desc(aX + kXP + 2048 * kk, 1024, 128);
      wgmma::m64n64k16_rs_tb(oa, pf[kk][0], vh);
      wgmma::m64n64k16_rs_tb(oa, pf[kk][0], vl);
      wgmma::m64n64k16_rs_tb(oa, pf[kk][1], vh);
    }
    wgmma::commit();
#pragma unroll
    for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        // K^T MN-major: state rows 64 mi .. are 8 core matrices 128 bytes apart; a 16-token step
        // is two row groups of k, 2 x 2048 bytes on.
        const uint64_t kt = desc(aK + 4096 * kk + 1024 * mi, 2048, 128);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          wgmma::m64n64k16_ss_t<1, 1>(st[mi], kt, desc(aLV + i * kXP + 2048 * kk, 1024, 128), 1);
        }
      }
    }
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operands<32>(oa);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = r0 + 8 * h, c = 8 * j + 2 * t;
        const float x = nfV[vc + c] <= r ? __int_as_float(0x7fc00000) : oa[4 * j + 2 * h];
        const float y = nfV[vc + c + 1] <= r ? __int_as_float(0x7fc00000) : oa[4 * j + 2 * h + 1];
        if (r < L) store2(p.out, p.out_dtype, ((c0 + r) * Hv + hv) * kD + vc + c, x, y, 2, true);
      }
    }
    wgmma::wait<0>();
    SG_DELTA_TRACE(10, ci);
    wgmma::fence_operands<32>(st[0]);
    wgmma::fence_operands<32>(st[1]);
    // Chunk ci is done with its k tile, gates and T: warpgroup 2 may fill buffer buf with chunk ci + 2.
    if (ci + 2 < nchunks) bar_arrive(kBarFree + buf, kThreads);
    wg_barrier(wg);  // every warp past the update (its LV' parts) and past its reads of nfV
    put_state();
    SG_DELTA_TRACE(11, ci);
  }

  // The final state, written once.
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = 64 * mi + r0 + 8 * h, c = vc + 8 * j + 2 * t;
        store2(p.state, p.state_dtype, state_at + i * kD + c, st[mi][4 * j + 2 * h], st[mi][4 * j + 2 * h + 1], 2,
               true);
      }
    }
  }
}

}  // namespace

cudaError_t delta_rule_prefill_wgmma(const DeltaRulePrefillParams& p, cudaStream_t stream) {
  LaunchCheck chk("delta_rule.prefill (wgmma)");
  check_delta_rule_prefill_params(chk, p);
  chk.require(delta_rule_prefill_wgmma_supports(p.Dk, p.Dv, p.qkv_dtype),
              "the form is built for bf16 q, k, v with Dk = Dv = 128");
  chk.require(p.norm_w == nullptr, "a fused output norm (norm_w) is built only in the mma form");
  chk.require(dev::aligned16(p.q) && dev::aligned16(p.k) && dev::aligned16(p.v) && dev::aligned16(p.out) &&
                  dev::aligned16(p.state),
              "q, k, v, out and state must be 16-byte aligned");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (const cudaError_t err = dev::require_sm90a(chk); err != cudaSuccess) return err;
  if (p.max_seqs == 0) return cudaSuccess;
  if (const cudaError_t e = dev::allow_dynamic_smem(delta_rule_wgmma_kernel, kSmem); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(p.Hv), static_cast<unsigned>(p.max_seqs));
  launch_kernel(delta_rule_wgmma_kernel, grid, dim3(kThreads), kSmem, stream, p);
  return cudaGetLastError();
}

}  // namespace sg
