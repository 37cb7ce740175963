// delta_rule_prefill_chunked.cu: the gated delta rule's prefill in the chunked WY form (see
// delta_rule_prefill_chunked.h for the math, the design and the contract). One block per (Dv tile,
// v-head, sequence) walks the sequence's chunks of 64 tokens; per chunk seven phases separated by
// block barriers:
//   P0 load k, q' = q / sqrt(Dk), the v tile (zero rows past the chunk's end); warp 0: g, beta, G
//   P1 [q'; k] x [S | K^T] in one pass over Dk -> P, A (shared), X (over v), exp(G) S^T q' (registers)
//   P2 T = (I + A)^-1: the two 32 x 32 diagonal blocks (2 warps; the other warps scale k by
//      exp(G_last - G)), then M = A10 T00, then T10 = -T11 M and the diagonal blocks transposed
//   P3 V' = T X
//   P4 o = exp(G) S^T q' + P V' (stored), S = exp(G_last) S + (exp(G_last - G) k)^T V'
// All products are explicit fmaf chains in increasing k (the library builds with -fmad=false).
// Thread (rg, cg) = (tid / (BV/4), tid % (BV/4)) owns tokens 4rg..4rg+3 and state columns
// 4cg..4cg+3 of the tile in P1, P3, P4 (its O accumulator waits in W, at those positions, during P2).
// ptxas -v (sm_90, CUDA 13.0): BV = 128 uses 128 registers (the 512-thread bound), BV = 64 and 32
// use 255; no spills for any built (Dk, BV). Holding the O accumulator in registers through P2, or
// P1 as one pass over Dk, spilled ~100 bytes at BV = 128.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/contracts.h"
#include "kernels/delta_rule_chunk_inverse.cuh"
#include "kernels/delta_rule_chunk_io.cuh"
#include "kernels/delta_rule_chunk_launch.cuh"
#include "kernels/delta_rule_prefill_chunked.h"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

using namespace chunk_io;  // NOLINT: the kernel's I/O helpers

constexpr int kChunk = kDeltaPrefillChunk;  // tokens a chunk

// Compile-time shape of one block: DK = Dk, BV = the Dv tile. Shared memory offsets in floats.
template <int DK, int BV>
struct Tile {
  static constexpr int C = kChunk;
  static constexpr int NT = 4 * BV;   // threads
  static constexpr int CG = BV / 4;   // column groups (4 state columns each)
  static constexpr int RG = NT / CG;  // row groups (4 tokens each): always 16
  static constexpr int NS = C / CG;   // P1: key tokens per thread in the A and P products
  static constexpr int RS = DK / RG;  // P4: state rows per thread
  static constexpr int LDK = DK + 4;  // k row pitch: rows start 4 banks apart (conflict-free column reads)
  static constexpr int LDT = C + 4;   // T and P row pitch
  static constexpr int WW = DK > BV ? DK : BV;
  static constexpr int oG = 0;             // G     [C] double
  static constexpr int oS = oG + 2 * C;    // S     [DK, BV]   state tile, S[i][j] at i * BV + j
  static constexpr int oK = oS + DK * BV;  // K     [C, LDK]   k, then exp(G_last - G_r) k (P2)
  static constexpr int oW = oK + C * LDK;  // W     [C, DK] q' (P0-P1), then [C, BV] V' (P3-P4)
  static constexpr int oV = oW + C * WW;   // V     [C, BV]    v tile, then X (P1)
  static constexpr int oT = oV + C * BV;   // T     [C, LDT]   A (P1), T = (I + A)^-1 (P2)
  static constexpr int oP = oT + C * LDT;  // P     [C, LDT]   exp(G_r - G_c) q'_r.k_c, 0 for c > r
  static constexpr int oE = oP + C * LDT;  // E     [C]        exp(G_r)
  static constexpr int oL = oE + C;        // EL    [C]        exp(G_last - G_r)
  static constexpr int oB = oL + C;        // beta  [C]
  static constexpr int floats = oB + C;
  static constexpr size_t bytes = floats * sizeof(float);
  static_assert(RG == 16 && C % CG == 0 && NS >= 1, "16 row groups of 4 tokens");
  static_assert(RS == 2 || RS == 4 || RS == 8, "state rows per thread in P4");
  static_assert(NT >= 128, "P2 uses warps 0 and 1 for the diagonal blocks and the rest to scale k");
  static_assert(oS % 4 == 0 && oK % 4 == 0 && oW % 4 == 0 && oV % 4 == 0 && oT % 4 == 0 && oP % 4 == 0,
                "16-byte aligned views");
  static_assert(bytes <= 227 * 1024, "fits one block's shared memory on sm_90");
  static_assert(bytes == delta_rule_prefill_chunked_smem(DK, BV),
                "the bytes the model plans with (delta_rule_prefill_shapes.h)");
};

__device__ __forceinline__ float comp(const float4& v, int u) {
  return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w;
}
__device__ __forceinline__ float4 scale4(float4 v, float w) { return make_float4(v.x * w, v.y * w, v.z * w, v.w * w); }

// acc = fmaf chain of a.x*b.x, a.y*b.y, a.z*b.z, a.w*b.w (one more 4-step of a dot product).
__device__ __forceinline__ float dot4(const float4& a, const float4& b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// acc[j] += sum_u a_u * b[u]_j for u = 0..3 in order: four steps of a row times a [4, 4] block.
__device__ __forceinline__ void fma_row(float (&acc)[4], const float4& a, const float4 (&b)[4]) {
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const float au = comp(a, u);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j] = fmaf(au, comp(b[u], j), acc[j]);
  }
}

// fma_row over the first nu (1..4) rows of b only: the diagonal 4 x 4 tile of a lower-triangular
// product. The terms above the diagonal are skipped, not multiplied by a zero, so a NaN or Inf of
// a later token of the tile cannot reach an earlier token through 0 * NaN (as in the scan).
__device__ __forceinline__ void fma_row_first(float (&acc)[4], const float4& a, const float4 (&b)[4], int nu) {
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    if (u >= nu) break;
    const float au = comp(a, u);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j] = fmaf(au, comp(b[u], j), acc[j]);
  }
}

// Grid (ceil(Dv / BV) * Hv, max_seqs), block 4 * BV threads, Tile<DK, BV>::bytes of dynamic shared
// memory. Every early exit depends on the sequence only (uniform over the block), so every barrier
// sees every thread. vec: q, k, v, out and state are 16-byte aligned and Dv % 4 == 0.
template <int DK, int BV>
__global__ void __launch_bounds__(4 * BV, 1) delta_rule_chunked_kernel(const DeltaRulePrefillParams p, const bool vec) {
  pdl_start();  // kernels/launch.cuh
  using Tl = Tile<DK, BV>;
  constexpr int C = Tl::C, NT = Tl::NT, CG = Tl::CG, NS = Tl::NS, RS = Tl::RS, LDK = Tl::LDK, LDT = Tl::LDT;
  extern __shared__ float4 smem4[];
  float* const sm = reinterpret_cast<float*>(smem4);
  double* const Gs = reinterpret_cast<double*>(sm + Tl::oG);  // [C] cumulative log decay G_r
  float* const Ss = sm + Tl::oS;                              // [DK, BV] state tile
  float* const Ks = sm + Tl::oK;  // [C, LDK] k rows (row r = token c0 + r); scaled by EL in P2
  float* const Qs = sm + Tl::oW;  // [C, DK]  q' rows (P0-P1)
  float* const Ws = sm + Tl::oW;  // [C, BV]  V' rows (P3-P4), the same memory as Qs
  float* const Vs = sm + Tl::oV;  // [C, BV]  v tile rows, then X
  float* const Ts = sm + Tl::oT;  // [C, LDT] A, then T (layout during P2: see there)
  float* const Ps = sm + Tl::oP;  // [C, LDT] P, zero above the diagonal
  float* const Es = sm + Tl::oE;  // [C] exp(G_r)
  float* const Ls = sm + Tl::oL;  // [C] exp(G_last - G_r)
  float* const Bs = sm + Tl::oB;  // [C] beta_r (0 past the chunk's end)

  const int Hv = p.Hv, Hk = p.Hk, Dv = p.Dv;
  const int tiles = (Dv + BV - 1) / BV;
  const int tile = static_cast<int>(blockIdx.x) % tiles, hv = static_cast<int>(blockIdx.x) / tiles;
  const int n = blockIdx.y;
  if (n >= *p.n_seqs) return;  // before reading cu_seqlens: it may hold only live + 1 entries
  const int64_t b = p.cu_seqlens[n], e = p.cu_seqlens[n + 1];
  if (e <= b) return;  // zero-length: no output, no state access
  const int slot = p.slots[n];
  const int tid = threadIdx.x, lane = tid & 31;
  const int rg = tid / CG, cg = tid % CG;
  const int r0 = 4 * rg, j0 = 4 * cg;  // this thread's first token row and first tile column
  const int v0 = tile * BV;
  const int cols = Dv - v0 - j0;  // this thread's valid columns (>= 4: all four; <= 0: none)
  if (slot < 0) {                 // padding: zero output rows (this tile's columns), state untouched
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int64_t f = tid; f < (e - b) * (BV / 4); f += NT) {
      const int64_t t = b + f / (BV / 4);
      const int j = 4 * static_cast<int>(f % (BV / 4));
      store4(p.out, p.out_dtype, (t * Hv + hv) * Dv + v0 + j, zero, Dv - v0 - j, vec);
    }
    return;
  }
  const bool hist = p.has_history[n] != 0;
  const int hk = hv / (Hv / Hk);
  const float scale = 1.0f / sqrtf(static_cast<float>(DK));
  // state[slot][hv] row i, tile column j at state_at + i * Dv + j.
  const int64_t state_at = (static_cast<int64_t>(slot) * Hv + hv) * DK * Dv + v0;

  // The state tile, read once (never without history): this thread's rows rg*RS.. (P4's mapping).
#pragma unroll
  for (int a = 0; a < RS; ++a) {
    const int i = rg * RS + a;
    const float4 s = hist ? load4(p.state, p.state_dtype, state_at + static_cast<int64_t>(i) * Dv + j0, cols, vec)
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    st4(Ss + i * BV + j0, s);
  }

  for (int64_t c0 = b; c0 < e; c0 += C) {
    const int L = static_cast<int>(e - c0 < C ? e - c0 : C);  // tokens in this chunk, 1..C

    // ---- P0: k -> Ks [C, LDK], q' -> Qs [C, DK], v tile -> Vs [C, BV]; rows >= L are zeros.
    for (int f = tid; f < C * DK / 4; f += NT) {
      const int r = f / (DK / 4), i = 4 * (f % (DK / 4));
      const int64_t at = ((c0 + r) * Hk + hk) * DK + i;  // [T, Hk, DK]
      const int ok = r < L ? 4 : 0;
      st4(Ks + r * LDK + i, load4(p.k, p.qkv_dtype, at, ok, vec));
      st4(Qs + r * DK + i, scale4(load4(p.q, p.qkv_dtype, at, ok, vec), scale));
    }
    for (int f = tid; f < C * BV / 4; f += NT) {
      const int r = f / (BV / 4), j = 4 * (f % (BV / 4));
      const int64_t at = ((c0 + r) * Hv + hv) * Dv + v0 + j;  // [T, Hv, Dv]
      st4(Vs + r * BV + j, load4(p.v, p.qkv_dtype, at, r < L ? Dv - v0 - j : 0, vec));
    }
    // Warp 0: G, exp(G), exp(G_last - G) and beta of the chunk.
    if (tid < 32) chunk_io::chunk_gates(p, c0, L, hv, lane, Gs, Es, Ls, Bs);
    __syncthreads();

    // ---- P1, first pass over Dk: rows r0..r0+3 of q' and k times k_c for this thread's key
    // tokens c = cg + CG*s -> P and A (no other thread reads them before the barrier).
    {
      float ap[4][NS] = {}, aa[4][NS] = {};
      for (int i = 0; i < DK; i += 4) {
        float4 kc[NS];  // k_c, features i..i+3
#pragma unroll
        for (int s = 0; s < NS; ++s) kc[s] = ld4(Ks + (cg + CG * s) * LDK + i);
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const float4 q4 = ld4(Qs + (r0 + t) * DK + i), k4 = ld4(Ks + (r0 + t) * LDK + i);
#pragma unroll
          for (int s = 0; s < NS; ++s) {
            ap[t][s] = dot4(q4, kc[s], ap[t][s]);
            aa[t][s] = dot4(k4, kc[s], aa[t][s]);
          }
        }
      }
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int r = r0 + t;
        const double Gr = Gs[r];
        const float br = Bs[r];
#pragma unroll
        for (int s = 0; s < NS; ++s) {
          const int c = cg + CG * s;
          const float w = c <= r ? expf(static_cast<float>(Gr - Gs[c])) : 0.0f;  // never exp of a positive
          Ps[r * LDT + c] = c <= r ? ap[t][s] * w : 0.0f;  // a select: ap may be NaN for a later token
          Ts[r * LDT + c] = c < r ? br * (aa[t][s] * w) : 0.0f;
        }
      }
    }
    // P1, second pass over Dk: the same rows times S (columns j0..j0+3) -> X over this thread's own
    // v elements, and aq = exp(G_r) S^T q'_r, the O accumulator (kept to P4).
    float aq[4][4] = {};
    {
      float ak[4][4] = {};
      for (int i = 0; i < DK; i += 4) {
        float4 s4[4];  // S rows i..i+3, columns j0..j0+3
#pragma unroll
        for (int u = 0; u < 4; ++u) s4[u] = ld4(Ss + (i + u) * BV + j0);
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          fma_row(aq[t], ld4(Qs + (r0 + t) * DK + i), s4);
          fma_row(ak[t], ld4(Ks + (r0 + t) * LDK + i), s4);
        }
      }
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const int r = r0 + t;
        const float br = Bs[r], er = Es[r];
        float4 x = ld4(Vs + r * BV + j0);
        x.x = br * (x.x - er * ak[t][0]);
        x.y = br * (x.y - er * ak[t][1]);
        x.z = br * (x.z - er * ak[t][2]);
        x.w = br * (x.w - er * ak[t][3]);
        st4(Vs + r * BV + j0, x);
#pragma unroll
        for (int j = 0; j < 4; ++j) aq[t][j] *= er;
      }
    }
    __syncthreads();

    // ---- P2: T = (I + A)^-1, with 32 x 32 blocks T00, T11 (diagonal), T10 = -T11 A10 T00.
    // The O accumulator waits in W (q' is dead) at this thread's own V' positions, so P2 runs
    // without its 16 registers (the inversion spilled with them); P3 takes it back before it
    // writes V' there.
#pragma unroll
    for (int t = 0; t < 4; ++t) st4(Ws + (r0 + t) * BV + j0, make_float4(aq[t][0], aq[t][1], aq[t][2], aq[t][3]));
    // Warp w < 2, lane c: column c of T_ww by forward substitution, t_r = [r == c] - sum_{m<r} A[r][m] t_m,
    // written TRANSPOSED into the upper triangle (diagonal included) of the same block: T_ww[r][c]
    // at (32w + c, 32w + r), r >= c; the strictly lower triangle still holds A for the other lanes.
    if (tid < 64) {
      chunk_inverse::diagonal_blocks<LDT>(Ts, tid, lane);
    } else {
      // The other warps: K <- exp(G_last - G_r) k_r (the state update's left factor; k is not read again).
      for (int f = tid - 64; f < C * DK / 4; f += NT - 64) {
        const int r = f / (DK / 4), i = 4 * (f % (DK / 4));
        st4(Ks + r * LDK + i, scale4(ld4(Ks + r * LDK + i), Ls[r]));
      }
    }
    __syncthreads();
    chunk_inverse::off_diagonal<LDT, NT>(Ts, tid);  // M = A10 T00, then T10 = -T11 M
    __syncthreads();

    // ---- P3: V' = T X -> Ws [C, BV]. Rows r0..r0+3, columns j0..j0+3, c <= r0 + 3.
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const float4 o = ld4(Ws + (r0 + t) * BV + j0);
      aq[t][0] = o.x;
      aq[t][1] = o.y;
      aq[t][2] = o.z;
      aq[t][3] = o.w;
    }
    {
      float acc[4][4] = {};
      for (int c4 = 0; c4 <= rg; ++c4) {
        float4 x[4];  // X rows 4c4..4c4+3
#pragma unroll
        for (int u = 0; u < 4; ++u) x[u] = ld4(Vs + (4 * c4 + u) * BV + j0);
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const float4 tr = ld4(Ts + (r0 + t) * LDT + 4 * c4);
          if (c4 == rg) {
            fma_row_first(acc[t], tr, x, t + 1);  // the diagonal 4 x 4 tile: T[r0+t][r0+u] = 0 for u > t
          } else {
            fma_row(acc[t], tr, x);
          }
        }
      }
#pragma unroll
      for (int t = 0; t < 4; ++t) st4(Ws + (r0 + t) * BV + j0, make_float4(acc[t][0], acc[t][1], acc[t][2], acc[t][3]));
    }
    __syncthreads();

    // ---- P4: o = exp(G) S^T q' + P V' (stored), then this thread's state rows rg*RS.. .
    for (int c4 = 0; c4 <= rg; ++c4) {
      float4 w[4];  // V' rows 4c4..4c4+3
#pragma unroll
      for (int u = 0; u < 4; ++u) w[u] = ld4(Ws + (4 * c4 + u) * BV + j0);
#pragma unroll
      for (int t = 0; t < 4; ++t) {
        const float4 pr = ld4(Ps + (r0 + t) * LDT + 4 * c4);
        if (c4 == rg) {
          fma_row_first(aq[t], pr, w, t + 1);  // the diagonal tile: P[r0+t][r0+u] = 0 for u > t
        } else {
          fma_row(aq[t], pr, w);
        }
      }
    }
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      if (r0 + t < L) {
        store4(p.out, p.out_dtype, ((c0 + r0 + t) * Hv + hv) * Dv + v0 + j0,
               make_float4(aq[t][0], aq[t][1], aq[t][2], aq[t][3]), cols, vec);
      }
    }
    {
      const float decay = Es[C - 1];  // exp(G_last)
      float4 sa[RS];                  // S rows rg*RS + a, columns j0..j0+3
#pragma unroll
      for (int a = 0; a < RS; ++a) sa[a] = scale4(ld4(Ss + (rg * RS + a) * BV + j0), decay);
      for (int c = 0; c < L; ++c) {
        const float4 w = ld4(Ws + c * BV + j0);
        const float* kr = Ks + c * LDK + rg * RS;  // exp(G_last - G_c) k_c, features rg*RS..
        float kv[RS];
#pragma unroll
        for (int a = 0; a < RS; a += 4) {
          if constexpr (RS >= 4) {
            const float4 k4 = ld4(kr + a);
            kv[a] = k4.x;
            kv[a + 1] = k4.y;
            kv[a + 2] = k4.z;
            kv[a + 3] = k4.w;
          } else {
            const float2 k2 = *reinterpret_cast<const float2*>(kr + a);
            kv[a] = k2.x;
            kv[a + 1] = k2.y;
          }
        }
#pragma unroll
        for (int a = 0; a < RS; ++a) {
          sa[a].x = fmaf(kv[a], w.x, sa[a].x);
          sa[a].y = fmaf(kv[a], w.y, sa[a].y);
          sa[a].z = fmaf(kv[a], w.z, sa[a].z);
          sa[a].w = fmaf(kv[a], w.w, sa[a].w);
        }
      }
#pragma unroll
      for (int a = 0; a < RS; ++a) st4(Ss + (rg * RS + a) * BV + j0, sa[a]);
    }
    __syncthreads();  // the next chunk overwrites K, W, V, T, P, G; P1 reads every thread's S
  }

  // The final state tile, written once (this thread's own elements: no barrier needed).
#pragma unroll
  for (int a = 0; a < RS; ++a) {
    const int i = rg * RS + a;
    store4(p.state, p.state_dtype, state_at + static_cast<int64_t>(i) * Dv + j0, ld4(Ss + i * BV + j0), cols, vec);
  }
}

}  // namespace

cudaError_t delta_rule_prefill_chunked(const DeltaRulePrefillParams& p, cudaStream_t stream, int dv_tile) {
  LaunchCheck chk("delta_rule.prefill (chunked)");
  refuse_delta_rule_prefill_norm(chk, p);
  if (!chk.ok()) return cudaErrorInvalidValue;
  return chunk_launch::checked_launch("delta_rule.prefill (chunked)", p, dv_tile, [&](auto dk, auto bv, bool vec) {
    using Tl = Tile<decltype(dk)::value, decltype(bv)::value>;
    return chunk_launch::launch<decltype(bv)::value>(
        delta_rule_chunked_kernel<decltype(dk)::value, decltype(bv)::value>, Tl::NT, Tl::bytes, p, vec, stream);
  });
}

}  // namespace sg
