// delta_rule_wgmma_chunk.cuh: the pieces of one 64-token chunk that the warpgroup delta-rule prefill
// kernels share (delta_rule_prefill_wgmma.cu, delta_rule_prefill_wgmma_t.cu): the bf16 tiles in the
// unswizzled core-matrix layout of wgmma_util.cuh, their cp.async copies, the bf16 high / low parts,
// a chunk's gates in shared memory, and the chunk's T = (I + A)^-1 from its k tile and gates
// (A = K K^T by wgmma, masked, beta and decay applied; the inverse on the CUDA cores; T's bf16 parts
// over its own f32 tile). Only translation units built for sm_90a include it (wgmma).
//
// Tile layout: chunk (row r, 16-byte column c) of a bf16 tile with C columns at
// (r / 8) C 16 + c 128 + (r % 8) 16.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule_chunk_inverse.cuh"
#include "kernels/delta_rule_chunk_io.cuh"
#include "kernels/delta_rule_prefill_shapes.h"
#include "kernels/mma_util.cuh"
#include "kernels/wgmma_util.cuh"

// Timeline points (tools/probes/delta_prefill_probe.cu with -DSG_PROBE_TRACE defines it before
// including a kernel); nothing in the library's build.
#ifndef SG_DELTA_TRACE
#define SG_DELTA_TRACE(point, chunk)
#endif

namespace sg::wgmma_chunk {

constexpr int kC = kDeltaPrefillChunk;   // tokens a chunk
constexpr int kD = kDeltaPrefillWgmmaD;  // Dk = Dv
// A / T row pitch (floats): 4 banks from one row to the next, so that the inverse's reads of 8
// rows' float4s (a quarter warp) and of 4 rows' floats hit distinct banks; 16-byte rows.
constexpr int kLDT = kC + 4;
constexpr uint32_t kQK = 16384;                // one [64 x 128] bf16 tile (q, k, v): row groups 2048 bytes apart
constexpr uint32_t kTB = kC * kLDT * 4;        // one A / T tile (f32); then T's bf16 parts in its first 2 kTP bytes
constexpr uint32_t kTP = kC * kC * 2;          // one bf16 part of T [64 x 64]: row groups 1024 bytes apart
constexpr uint32_t kGB = kC * 8 + 3 * kC * 4;  // one chunk's gates: G (double), exp(G), exp(G_last - G), beta
constexpr int kBarAux = 8;                     // the named barrier of the 128 threads that compute T
static_assert(2 * kTP <= kTB, "T's parts fit its f32 tile");
static_assert(kTB % 16 == 0 && kGB % 16 == 0, "aligned views");

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
    mma::cp_async16(dst + 16 * i, s + ((c0 + (in ? r : 0)) * H + h) * kD + c * 8, in);
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

// The m16n8k16 A fragments (both parts) of the 16-column k-step kk of a thread's m64n64
// accumulator (element i = 4 j + q: row r0 + 8 (q >> 1), column 8 j + 2 t + (q & 1)), each element
// passed through f(i) first.
template <typename F>
__device__ __forceinline__ void fragments_of(int kk, uint32_t (&a)[2][4], F f) {
#pragma unroll
  for (int q = 0; q < 4; ++q) {  // a0: row g, cols 2t; a1: row g + 8; a2, a3: cols + 8 (n-tile 2 kk + 1)
    const int j = 2 * kk + (q >> 1), i = 4 * j + 2 * (q & 1);
    uint32_t w[2];
    mma::split_pair<2>(f(i), f(i + 1), w);
    a[0][q] = w[0];
    a[1][q] = w[1];
  }
}
__device__ __forceinline__ void acc_fragments(const float* acc, int kk, uint32_t (&a)[2][4]) {
  fragments_of(kk, a, [acc](int i) { return acc[i]; });
}

// acc += A B over four 16-wide k-steps with A's parts a[kk] (registers) and B a [64 x 64] K-major
// pair of part tiles at `parts` (hi, lo kTP on), as hi*hi, then A's low part, then B's: the
// one-kernel form's order for a product of two split operands.
__device__ __forceinline__ void split_product(float* acc, const uint32_t (&a)[4][2][4], uint32_t parts) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {  // K-major: a 16-wide k-step is two core matrices, 256 bytes on
    const uint64_t hi = wgmma::desc(parts + 256 * kk, 128, 1024), lo = wgmma::desc(parts + kTP + 256 * kk, 128, 1024);
    wgmma::m64n64k16_rs_t<0>(acc, a[kk][0], hi, 1);
    wgmma::m64n64k16_rs_t<0>(acc, a[kk][1], hi, 1);
    wgmma::m64n64k16_rs_t<0>(acc, a[kk][0], lo, 1);
  }
}

__device__ __forceinline__ void bar_sync(int id, int n) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void bar_arrive(int id, int n) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory");
}
struct AuxBarrier {  // the T threads' own barrier (chunk_inverse::off_diagonal's)
  int id = kBarAux;
  __device__ __forceinline__ void operator()() const { bar_sync(id, 128); }
};

// One chunk's gates (kGB bytes at `g`, 16-byte aligned).
struct Gates {
  double* G;  // [64] cumulative log decay
  float* E;   // [64] exp(G_r)
  float* L;   // [64] exp(G_last - G_r)
  float* B;   // [64] beta_r (0 past the chunk's end)
};
__device__ __forceinline__ Gates gates_in(unsigned char* g) {
  float* e = reinterpret_cast<float*>(g + kC * 8);
  return {reinterpret_cast<double*>(g), e, e + kC, e + 2 * kC};
}

// Output rows b .. e - 1 of v-head hv (out [T, Hv, 128] of p.out_dtype) all `value`, by nt threads
// (this one is `it` of them); vec: out is 16-byte aligned (four values a store).
__device__ __forceinline__ void fill_rows(const DeltaRulePrefillParams& p, int64_t b, int64_t e, int hv, float value,
                                          int it, int nt, bool vec) {
  const float4 v4 = make_float4(value, value, value, value);
  for (int64_t f = it; f < (e - b) * (kD / 4); f += nt) {
    const int64_t tk = b + f / (kD / 4);
    chunk_io::store4(p.out, p.out_dtype, (tk * p.Hv + hv) * kD + 4 * (f % (kD / 4)), v4, 4, vec);
  }
}

// P = Q K^T of a chunk in an m64n64 accumulator (pa[4 j + q]: query token r0 + 8 (q >> 1), key
// token 8 j + 2 t + (q & 1)), in place: scaled, decayed by exp(G_r - G_c), exact zeros above the
// diagonal (selected: a later token's k may be non-finite).
__device__ __forceinline__ void mask_p(float* pa, const Gates& gt, float scale, int r0, int t) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = r0 + 8 * (q >> 1), c = 8 * j + 2 * t + (q & 1);
      const float w = c <= r ? expf(static_cast<float>(gt.G[r] - gt.G[c])) : 0.0f;  // never exp of a positive
      pa[4 * j + q] = c <= r ? (pa[4 * j + q] * scale) * w : 0.0f;
    }
  }
}

// T's high and low bf16 parts (exact zeros above the diagonal) over its own f32 tile, by the 128 T
// threads (thread ai), as the K-major operand of V' = T X: two [64 x 64] core-matrix tiles, hi at
// `parts`, lo kTP bytes on. Thread ai takes rows 16 w + (ai % 8) and 8 more (w = ai / 32) and the
// column chunks (ai % 32) / 8 and 4 more: 32 values, read before the group's barrier, written after.
__device__ __forceinline__ void t_parts(const float* Ts, unsigned char* parts, int ai, int bar = kBarAux) {
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
  bar_sync(bar, 128);  // every thread has read its T values: the parts may overwrite the f32 tile
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

// A chunk's T from its k tile (shared address aK, complete and visible to wgmma) and gates (visible
// to the 128 T threads), by those threads (thread ai of them, under the named barrier kBarAux):
// A = K K^T masked below the diagonal with beta and decay as the mma kernel applies them, into the
// f32 tile Ts; T = (I + A)^-1 there (four 16 x 16 diagonal blocks, a warp each, then the 32 x 32
// merges and the off-diagonal block); then T's bf16 parts over Ts (t_parts), fenced for wgmma.
// The caller arrives at its consumers' barrier after it. n: the chunk's index (timeline points only).
__device__ __forceinline__ void chunk_t(uint32_t aK, const Gates& gt, float* Ts, int ai, [[maybe_unused]] int n,
                                        int bar = kBarAux) {
  const int lane = ai & 31, g = lane >> 2, t = lane & 3;
  const int r0 = 16 * (ai >> 5) + g;
#pragma unroll 1
  for (int half = 0; half < 2; ++half) {  // A's columns 32 half .. 32 half + 31 (16 registers of accumulator)
    float aa[16];
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      wgmma::m64n32k16_ss(aa, wgmma::desc(aK + 256 * kk, 128, 2048),
                          wgmma::desc(aK + 4 * 2048 * half + 256 * kk, 128, 2048), kk > 0);
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
  bar_sync(bar, 128);
  SG_DELTA_TRACE(2, n);
  chunk_inverse::diagonal_blocks16<kLDT>(Ts, ai, lane);  // four 16 x 16 blocks, a warp each
  bar_sync(bar, 128);
  chunk_inverse::merge16<kLDT>(Ts, ai, AuxBarrier{bar});  // the two 32 x 32 blocks
  bar_sync(bar, 128);
  SG_DELTA_TRACE(3, n);
  chunk_inverse::off_diagonal<kLDT, 128, AuxBarrier, true>(Ts, ai, AuxBarrier{bar});
  bar_sync(bar, 128);  // T complete (c <= r)
  t_parts(Ts, reinterpret_cast<unsigned char*>(Ts), ai, bar);
  wgmma::fence_proxy_async();
}

}  // namespace sg::wgmma_chunk
