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
#include "kernels/delta_rule_chunk_inverse.cuh"
#include "kernels/delta_rule_chunk_io.cuh"
#include "kernels/delta_rule_prefill_wgmma.h"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"
#include "kernels/wgmma_util.cuh"

// Timeline points for tools/probes/delta_prefill_probe.cu (-DSG_PROBE_TRACE records the SM clock
// at each point of one block, chunk by chunk); nothing in the library's build. A point just after a
// barrier may read the clock before the barrier has released the warp (the barrier's blocking is
// deferred to the next dependent instruction), so a wait shows in the phase after it.
#ifndef SG_DELTA_TRACE
#define SG_DELTA_TRACE(point, chunk)
#endif

namespace sg {
namespace {

using chunk_io::store2;
using chunk_io::store4;
using mma::cp_async16;
using mma::smem_addr;
using wgmma::desc;

constexpr int kC = 64;                         // tokens a chunk
constexpr int kD = 128;                        // Dk = Dv
constexpr int kThreads = 384;                  // warpgroups 0 and 1: the state's products; 2: the chunk's T
constexpr int kLDT = kC + 8;                   // A / T row pitch (floats), as the mma kernel's
constexpr uint32_t kQK = 16384;                // one [64 x 128] bf16 tile (q, k, v): row groups 2048 bytes apart
constexpr uint32_t kSP = 16384;                // one part of a warpgroup's S [128 x 64]: row groups 1024 bytes apart
constexpr uint32_t kXP = 8192;                 // one part of a warpgroup's X / V' or LV' [64 x 64]
constexpr uint32_t kTB = kC * kLDT * 4;        // one A / T tile (f32); then T's bf16 parts in its first 2 kTP bytes
constexpr uint32_t kTP = kC * kC * 2;          // one bf16 part of T [64 x 64]: row groups 1024 bytes apart
constexpr uint32_t kGB = kC * 8 + 3 * kC * 4;  // one chunk's gates: G (double), exp(G), exp(G_last - G), beta
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
// free again (0 and 1 arrive, 2 waits); 8 warpgroup 2's own.
constexpr int kBarState = 3, kBarReady = 4, kBarFree = 6, kBarAux = 8;
// Registers a thread after the warpgroups' setmaxnreg: the block holds 168 x 384 (the launch
// bound's), so 2 x 200 + 104 = 504 = 3 x 168 (a larger sum would leave setmaxnreg.inc waiting
// forever). Warpgroup 2's chain is as long as the state warpgroups' (its substitutions and products
// are latency-bound), and the split decides how fast both run: of the splits measured on the H200
// (224 / 56 to 192 / 120), 200 / 104 is the fastest with this code (docs/BENCHMARKS.md).
constexpr int kStateRegs = 200, kAuxRegs = 104;
static_assert(2 * kStateRegs + kAuxRegs == 3 * (65536 / kThreads / 8 * 8), "the registers the block holds");
static_assert(kSmem <= 227 * 1024, "fits one block's shared memory on sm_90");
static_assert(2 * kXP <= kSP, "LV' parts fit the S region's first part");
static_assert(2 * kTP <= kTB, "T's parts fit its f32 tile");
static_assert(oT % 16 == 0 && oG % 16 == 0 && kGB % 16 == 0 && kTB % 16 == 0, "aligned views");

// The 16-byte chunk (row r, column c) of a bf16 tile of `cols` columns in the core-matrix layout.
template <int kCols>
__device__ __forceinline__ uint32_t at(int r, int c) {
  return static_cast<uint32_t>((r >> 3) * kCols * 16 + (c >> 3) * 128 + (r & 7) * 16 + (c & 7) * 2);
}

// Copies rows c0 .. c0 + n - 1 (n >= 1) of a [T, H, 128] bf16 tensor's head h into a [64 x 128]
// tile at `dst`, zeros for rows >= n, by `nt` threads (this one is `it` of them): thread it's
// chunks land at bytes 16 it, 16 (it + nt), ...
__device__ __forceinline__ void load_tile(uint32_t dst, const void* src, int64_t c0, int n, int H, int h, int it,
                                          int nt) {
  const auto* s = static_cast<const __nv_bfloat16*>(src);
  for (int i = it; i < kC * kD / 8; i += nt) {
    const int c = (i >> 3) % (kD / 8), r = ((i >> 3) / (kD / 8)) * 8 + (i & 7);
    const bool in = r < n;
    cp_async16(dst + 16 * i, s + ((c0 + (in ? r : 0)) * H + h) * kD + c * 8, in);
  }
}

// Both bf16 parts of the pair (x, y) at row r, columns c, c + 1 (c even) of a part-tile pair.
template <int kCols>
__device__ __forceinline__ void put_parts(unsigned char* hi, unsigned char* lo, int r, int c, float x, float y) {
  uint32_t w[2];
  mma::split_pair<2>(x, y, w);
  const uint32_t o = at<kCols>(r, c);
  *reinterpret_cast<uint32_t*>(hi + o) = w[0];
  *reinterpret_cast<uint32_t*>(lo + o) = w[1];
}

// The m16n8k16 A fragments (both parts) of the 16-column k-step kk from a thread's m64n64
// accumulator (acc[4 j + q]: row r0 + 8 (q >> 1), column 8 j + 2 t + (q & 1)).
__device__ __forceinline__ void acc_fragments(const float* acc, int kk, uint32_t (&a)[2][4]) {
#pragma unroll
  for (int f = 0; f < 4; ++f) {  // a0: row g, cols 2t; a1: row g + 8; a2, a3: cols + 8 (n-tile 2 kk + 1)
    const int j = 2 * kk + (f >> 1), q = 2 * (f & 1);
    uint32_t w[2];
    mma::split_pair<2>(acc[4 * j + q], acc[4 * j + q + 1], w);
    a[0][f] = w[0];
    a[1][f] = w[1];
  }
}

__device__ __forceinline__ float2 load_pair(const void* s, DType t, int64_t i) {
  if (t == DType::bf16) {
    const uint32_t u = *reinterpret_cast<const uint32_t*>(static_cast<const uint16_t*>(s) + i);
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  }
  return *reinterpret_cast<const float2*>(static_cast<const float*>(s) + i);
}

__device__ __forceinline__ void wg_barrier(int wg) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory"); }
__device__ __forceinline__ void bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
struct AuxBarrier {  // warpgroup 2's own barrier (chunk_inverse::off_diagonal's)
  __device__ __forceinline__ void operator()() const { bar_sync(kBarAux, 128); }
};

// One chunk's gates in buffer b.
struct Gates {
  double* G;  // [64] cumulative log decay
  float* E;   // [64] exp(G_r)
  float* L;   // [64] exp(G_last - G_r)
  float* B;   // [64] beta_r (0 past the chunk's end)
};
__device__ __forceinline__ Gates gates_at(unsigned char* smem, int b) {
  unsigned char* g = smem + oG + b * kGB;
  float* e = reinterpret_cast<float*>(g + kC * 8);
  return {reinterpret_cast<double*>(g), e, e + kC, e + 2 * kC};
}

// T's high and low bf16 parts (exact zeros above the diagonal) over its own f32 tile, by warpgroup 2
// (thread ai of 128), as the K-major A operand of V' = T X: two [64 x 64] core-matrix tiles, hi at
// `parts`, lo kTP bytes on. Thread ai takes rows 16 w + (ai % 8) and 8 more (w = ai / 32) and the
// column chunks (ai % 32) / 8 and 4 more: 32 values, read before the group's barrier, written after.
__device__ __forceinline__ void t_parts(const float* Ts, unsigned char* parts, int ai) {
  const int lane = ai & 31, rb = 16 * (ai >> 5) + (lane & 7), cg = lane >> 3;
  uint32_t hi[2][2][4], lo[2][2][4];  // [row half][chunk][pair]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int r = rb + 8 * h, c0 = 8 * (cg + 4 * q);
      const float4 a = chunk_io::ld4(Ts + r * kLDT + c0), b = chunk_io::ld4(Ts + r * kLDT + c0 + 4);
      const float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = c0 + 2 * i;
        uint32_t w[2];
        mma::split_pair<2>(c <= r ? x[2 * i] : 0.0f, c + 1 <= r ? x[2 * i + 1] : 0.0f, w);
        hi[h][q][i] = w[0];
        lo[h][q][i] = w[1];
      }
    }
  }
  bar_sync(kBarAux, 128);  // every thread has read its T values: the parts may overwrite the f32 tile
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const uint32_t o = at<kC>(rb + 8 * h, 8 * (cg + 4 * q));
      *reinterpret_cast<uint4*>(parts + o) = make_uint4(hi[h][q][0], hi[h][q][1], hi[h][q][2], hi[h][q][3]);
      *reinterpret_cast<uint4*>(parts + kTP + o) = make_uint4(lo[h][q][0], lo[h][q][1], lo[h][q][2], lo[h][q][3]);
    }
  }
}

// Warpgroup 2, chunk by chunk one ahead of the state warpgroups: the chunk's k tile (cp.async),
// its gates, A = K K^T (wgmma, masked, beta and decay applied as the mma kernel does),
// T = (I + A)^-1 and T's parts into buffer n % 2; then it signals the chunk ready. From chunk 2 on it first
// waits until chunk n - 2 has released the buffer.
__device__ __forceinline__ void aux_warpgroup(const DeltaRulePrefillParams& p, unsigned char* smem, uint32_t base,
                                              int64_t b, int64_t e, int hv, int hk) {
  const int ai = threadIdx.x - 256, lane = ai & 31, g = lane >> 2, t = lane & 3;  // ai: 0 .. 127
  const int r0 = 16 * (ai >> 5) + g;
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
    float* const Ts = reinterpret_cast<float*>(smem + oT + buf * kTB);
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {  // A's columns 32 half .. 32 half + 31 (16 registers of accumulator)
      float aa[16];
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        wgmma::m64n32k16_ss(aa, desc(aK + 256 * kk, 128, 2048), desc(aK + 4 * 2048 * half + 256 * kk, 128, 2048),
                            kk > 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands<16>(aa);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = r0 + 8 * (q >> 1), c = 32 * half + 8 * j + 2 * t + (q & 1);
          const float w = c < r ? expf(static_cast<float>(gt.G[r] - gt.G[c])) : 0.0f;  // never exp of a positive
          Ts[r * kLDT + c] = c < r ? gt.B[r] * (aa[4 * j + q] * w) : 0.0f;
        }
      }
    }
    bar_sync(kBarAux, 128);
    SG_DELTA_TRACE(2, n);
    chunk_inverse::diagonal_blocks16<kLDT>(Ts, ai, lane);  // four 16 x 16 blocks, a warp each
    bar_sync(kBarAux, 128);
    chunk_inverse::merge16<kLDT>(Ts, ai, AuxBarrier{});  // the two 32 x 32 blocks
    bar_sync(kBarAux, 128);
    SG_DELTA_TRACE(3, n);
    chunk_inverse::off_diagonal<kLDT, 128, AuxBarrier, true>(Ts, ai, AuxBarrier{});
    bar_sync(kBarAux, 128);  // T complete (c <= r)
    t_parts(Ts, smem + oT + buf * kTB, ai);
    wgmma::fence_proxy_async();
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
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int64_t f = tid; f < (e - b) * (kD / 4); f += kThreads) {
      const int64_t tk = b + f / (kD / 4);
      store4(p.out, p.out_dtype, (tk * Hv + hv) * kD + 4 * (f % (kD / 4)), zero, 4, true);
    }
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
    // P: scaled and decayed, exact zeros above the diagonal (selected: a later token's k may be
    // non-finite), then split into the register A operand of P V'.
    uint32_t pf[4][2][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = r0 + 8 * (q >> 1), c = 8 * j + 2 * t + (q & 1);
        const float w = c <= r ? expf(static_cast<float>(gt.G[r] - gt.G[c])) : 0.0f;  // never exp of a positive
        pa[4 * j + q] = c <= r ? (pa[4 * j + q] * scale) * w : 0.0f;
      }
    }
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

bool delta_rule_prefill_wgmma_supports(int Dk, int Dv, DType qkv) { return Dk == kD && Dv == kD && qkv == DType::bf16; }

bool delta_rule_prefill_wgmma_device(int cc_major, int cc_minor) { return sm90a_device(cc_major, cc_minor); }

size_t delta_rule_prefill_wgmma_smem() { return kSmem; }

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
