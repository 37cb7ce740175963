// delta_rule_prefill_mma.cu: the gated delta rule's prefill in the chunked WY form with the large
// products on the tensor cores (see delta_rule_prefill_mma.h for the design, the accuracy and the
// contract; delta_rule_prefill_chunked.cu is the CUDA-core form it follows phase by phase).
// One block per (Dv tile, v-head, sequence) walks the sequence's chunks of 64 tokens; per chunk:
//   P0 load k, q (unscaled), the v tile (zero rows past the chunk's end); warp 0: g, beta, G
//   P1 a: [q; k] K^T (the lower triangle, 16 x 8 tiles) -> P, A; b: [q; k] S -> O (registers), X
//      (warp w: state columns 8w..8w+7, all rows of [q; k]); the next chunk's rows are prefetched to L2
//   P2 O -> shared; T = (I + A)^-1 on the CUDA cores (the chunked kernel's blockwise substitution)
//   P3 V' = T X (registers), then V' over X
//   P4 o = O + P V' (stored); S = exp(G_last) S + K^T (exp(G_last - G) V')
// mma.sync m16n8k16 bf16 -> f32. With bf16 inputs, q and k are exactly bf16: they are kept as bf16
// tiles and their fragments are read by ldmatrix (one instruction a 16 x 16 A fragment; .trans for
// K^T in the state update), one part. Every other operand (and q, k with f32 inputs, kept as f32
// tiles) is read from f32 shared tiles and split into a high and a low bf16 part
// (mma::split_pair<2>), multiplied as lo*hi + hi*lo + hi*hi. The input dtype is a template
// parameter, so no fragment code branches at run time. ldmatrix reads the bf16 values that a
// conversion of f32 tiles would give, so the products are those of the f32-tile form.
// ptxas -v (sm_90, CUDA 13.0): BV = 128 uses 128 registers (the 512-thread bound) with 24 bytes of
// spill at Dk = 128 (28 and 32 at Dk = 64 and 32), either dtype; BV = 64 and 32 use 255, no spills.
// One pass of the three products in P1b with a runtime flag for two-part q, k spilled ~50 bytes at
// Dk = Dv = 128.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/contracts.h"
#include "kernels/delta_rule_chunk_inverse.cuh"
#include "kernels/delta_rule_chunk_io.cuh"
#include "kernels/delta_rule_chunk_launch.cuh"
#include "kernels/delta_rule_gated_out.cuh"
#include "kernels/delta_rule_mma_frag.cuh"
#include "kernels/delta_rule_mma_tile.cuh"
#include "kernels/delta_rule_prefill_mma.h"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"

namespace sg {
namespace {

using namespace chunk_io;  // NOLINT: the kernel's I/O helpers
using namespace mma_frag;  // NOLINT: its fragments
using namespace mma_tile;  // NOLINT: its shared-memory layout

using bf16 = __nv_bfloat16;

// Grid (ceil(Dv / BV) * Hv, max_seqs), block 4 * BV threads, MTile<DK, BV>::bytes of dynamic shared
// memory. Every early exit depends on the sequence only (uniform over the block), so every barrier
// sees every thread. vec: q, k, v, out and state are 16-byte aligned and Dv % 4 == 0. GN: the gated
// norm fused into the output (p.norm_w; BV == Dv, bf16 out): P4 keeps the chunk's bf16 output
// in the T tile (free from P4 to the next chunk's P1), normed and stored after the chunk's last
// barrier (gated_out::norm_rows); the grid has one more row of blocks, which zero the rows past the
// live count.
template <int DK, int BV, bool TWO, bool GN>
__global__ void __launch_bounds__(4 * BV, 1) delta_rule_mma_kernel(const DeltaRulePrefillParams p, const bool vec) {
  pdl_start();  // kernels/launch.cuh
  using Tl = MTile<DK, BV, TWO>;
  constexpr int C = Tl::C, NT = Tl::NT, NW = Tl::NW, CG = Tl::CG, RS = Tl::RS;
  constexpr int LDK = Tl::LDK, LDS = Tl::LDS, LDT = Tl::LDT, WM1 = Tl::WM1, WN1 = Tl::WN1;
  extern __shared__ float4 smem4[];
  float* const sm = reinterpret_cast<float*>(smem4);
  double* const Gs = reinterpret_cast<double*>(sm + Tl::oG);  // [C] cumulative log decay G_r
  float* const Ss = sm + Tl::oS;                              // [DK, LDS] state tile
  float* const Ks = sm + Tl::oK;                              // [C, LDK] k rows (row r = token c0 + r), TWO
  float* const Qs = sm + Tl::oQ;                              // [C, LDK] q rows (P0-P1), TWO
  bf16* const Kh = reinterpret_cast<bf16*>(Ks);               // [C, LDK] k rows, !TWO
  bf16* const Qh = reinterpret_cast<bf16*>(Qs);               // [C, LDK] q rows, !TWO
  float* const Os = sm + Tl::oQ;                              // [C, LDS] O = exp(G) S^T q' (P2-P4)
  float* const Vs = sm + Tl::oV;                              // [C, LDS] v tile rows, then X, then V'
  float* const Ts = sm + Tl::oT;                              // [C, LDT] A, then T
  float* const Ps = sm + Tl::oP;                              // [C, LDT] P, zero above the diagonal
  float* const Es = sm + Tl::oE;                              // [C] exp(G_r)
  float* const Ls = sm + Tl::oL;                              // [C] exp(G_last - G_r)
  float* const Bs = sm + Tl::oB;                              // [C] beta_r (0 past the chunk's end)
  int* const nfX = reinterpret_cast<int*>(sm + Tl::oN);       // [BV] first row with a non-finite X
  int* const nfV = nfX + BV;                                  // [BV] first row with a non-finite V'
  bf16* const Xh = reinterpret_cast<bf16*>(sm + Tl::oXh);     // [C, LDB] X, then V': high parts (!TWO)
  bf16* const Xl = reinterpret_cast<bf16*>(sm + Tl::oXl);     // [C, LDB] low parts (!TWO)
  constexpr int LDB = Tl::LDB;
  bf16* const Ob = reinterpret_cast<bf16*>(Ts);  // [C, LDO] the chunk's bf16 output (GN, P4 to the norm)
  constexpr int LDO = BV + 8;                    // an odd number of 16-byte units: conflict-free P4 stores
  static_assert(!GN || C * LDO / 2 <= C * LDT, "the output tile fits the T tile");

  const int Hv = p.Hv, Hk = p.Hk, Dv = p.Dv;
  const int tiles = (Dv + BV - 1) / BV;
  const int tile = static_cast<int>(blockIdx.x) % tiles, hv = static_cast<int>(blockIdx.x) / tiles;
  const int n = blockIdx.y;
  if (n >= *p.n_seqs) {  // before reading cu_seqlens: it may hold only live + 1 entries
    if constexpr (GN) {
      if (n == p.max_seqs) gated_out::zero_tail<BV, NT>(p, hv, static_cast<int>(threadIdx.x));  // the extra row
    }
    return;
  }
  const int64_t b = p.cu_seqlens[n], e = p.cu_seqlens[n + 1];
  if (e <= b) return;  // zero-length: no output, no state access
  const int slot = p.slots[n];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // mma fragment coordinates
  const int rg = tid / CG, cg = tid % CG;
  const int j0 = 4 * cg;  // state load/store: this thread's first tile column
  const int v0 = tile * BV;
  const int cols = Dv - v0 - j0;  // this thread's valid columns (>= 4: all four; <= 0: none)
  if (slot < 0) {                 // padding: zero output rows (this tile's columns), state untouched
    if constexpr (GN) {           // their norm (of zeros)
      gated_out::norm_rows<BV, NT>(p, nullptr, 0, b, static_cast<int>(e - b), hv, tid);
      return;
    }
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int64_t f = tid; f < (e - b) * (BV / 4); f += NT) {
      const int64_t tk = b + f / (BV / 4);
      const int j = 4 * static_cast<int>(f % (BV / 4));
      store4(p.out, p.out_dtype, (tk * Hv + hv) * Dv + v0 + j, zero, Dv - v0 - j, vec);
    }
    return;
  }
  const bool hist = p.has_history[n] != 0;
  constexpr bool two = TWO;  // q and k need a low part (f32 inputs; the launcher checks the dtype)
  const int hk = hv / (Hv / Hk);
  const float scale = 1.0f / sqrtf(static_cast<float>(DK));
  // state[slot][hv] row i, tile column j at state_at + i * Dv + j.
  const int64_t state_at = (static_cast<int64_t>(slot) * Hv + hv) * DK * Dv + v0;

  // The state tile, read once (never without history).
#pragma unroll
  for (int a = 0; a < RS; ++a) {
    const int i = rg * RS + a;
    const float4 s = hist ? load4(p.state, p.state_dtype, state_at + static_cast<int64_t>(i) * Dv + j0, cols, vec)
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    st4(Ss + i * LDS + j0, s);
  }

  for (int64_t c0 = b; c0 < e; c0 += C) {
    const int L = static_cast<int>(e - c0 < C ? e - c0 : C);  // tokens in this chunk, 1..C

    // ---- P0: k -> Ks, q -> Qs, v tile -> Vs; rows >= L are zeros. Each thread issues all its
    // loads (in groups of up to 4 rows of 4 elements per array) before it stores any, so the
    // chunk waits for about one memory latency; the rows were prefetched into L2 a chunk earlier.
    {
      constexpr int IQ = C * DK / 4 / NT, GQ = IQ < 4 ? IQ : 4;  // float4s of q (and of k) per thread
      constexpr int IV = C * BV / 4 / NT;                        // float4s of v per thread (4)
      static_assert(IQ >= 1 && IQ % GQ == 0 && IV == 4 && C * DK / 4 == IQ * NT && C * BV / 4 == IV * NT, "");
#pragma unroll
      for (int i0 = 0; i0 < IQ; i0 += GQ) {
        float4 kx[GQ], qx[GQ];
#pragma unroll
        for (int u = 0; u < GQ; ++u) {
          const int f = tid + (i0 + u) * NT;
          const int r = f / (DK / 4), i = 4 * (f % (DK / 4));
          const int64_t at = ((c0 + r) * Hk + hk) * DK + i;  // [T, Hk, DK]
          const int ok = r < L ? 4 : 0;
          kx[u] = load4(p.k, p.qkv_dtype, at, ok, vec);
          qx[u] = load4(p.q, p.qkv_dtype, at, ok, vec);
        }
#pragma unroll
        for (int u = 0; u < GQ; ++u) {
          const int f = tid + (i0 + u) * NT;
          const int r = f / (DK / 4), i = 4 * (f % (DK / 4));
          if constexpr (TWO) {
            st4(Ks + r * LDK + i, kx[u]);
            st4(Qs + r * LDK + i, qx[u]);
          } else {  // exactly bf16: the conversion back is exact
            *reinterpret_cast<uint2*>(Kh + r * LDK + i) =
                make_uint2(bf16_pair(kx[u].x, kx[u].y), bf16_pair(kx[u].z, kx[u].w));
            *reinterpret_cast<uint2*>(Qh + r * LDK + i) =
                make_uint2(bf16_pair(qx[u].x, qx[u].y), bf16_pair(qx[u].z, qx[u].w));
          }
        }
      }
      float4 vx[IV];
#pragma unroll
      for (int u = 0; u < IV; ++u) {
        const int f = tid + u * NT;
        const int r = f / (BV / 4), j = 4 * (f % (BV / 4));
        const int64_t at = ((c0 + r) * Hv + hv) * Dv + v0 + j;  // [T, Hv, Dv]
        vx[u] = load4(p.v, p.qkv_dtype, at, r < L ? Dv - v0 - j : 0, vec);
      }
#pragma unroll
      for (int u = 0; u < IV; ++u) {
        const int f = tid + u * NT;
        const int r = f / (BV / 4), j = 4 * (f % (BV / 4));
        st4(Vs + r * LDS + j, vx[u]);
      }
    }
    // The next chunk's rows of q, k, v (this tile's columns), g and beta into L2 (not a read: the
    // values are not used; only rows of this sequence, so every address is inside the buffers).
    {
      const int64_t c1 = c0 + C;
      const int es = p.qkv_dtype == DType::bf16 ? 2 : 4;
      for (int f = tid; f < (GN ? 6 : 5) * C; f += NT) {
        const int which = f / C, r = f % C;
        if (c1 + r >= e) continue;
        const int64_t tok = c1 + r;
        const char* a;
        int bytes;
        if (which == 0 || which == 1) {
          a = static_cast<const char*>(which == 0 ? p.q : p.k) + ((tok * Hk + hk) * DK) * es;
          bytes = DK * es;
        } else if (which == 2) {
          a = static_cast<const char*>(p.v) + ((tok * Hv + hv) * Dv + v0) * es;
          bytes = (Dv - v0 < BV ? Dv - v0 : BV) * es;
        } else if (GN && which == 5) {  // the norm's gate row
          const int64_t zts = p.norm_z_stride ? p.norm_z_stride : static_cast<int64_t>(Hv) * Dv;
          a = static_cast<const char*>(p.norm_z) + (tok * zts + static_cast<int64_t>(hv) * Dv) * 2;
          bytes = Dv * 2;
        } else {
          a = reinterpret_cast<const char*>((which == 3 ? p.g : p.beta) + tok * Hv + hv);
          bytes = 4;
        }
        for (int o = 0; o < bytes; o += 128) asm volatile("prefetch.global.L2 [%0];" ::"l"(a + o));
      }
    }
    for (int j = tid; j < 2 * BV; j += NT) nfX[j] = C;
    // Warp 0: G, exp(G), exp(G_last - G) and beta of the chunk.
    if (tid < 32) chunk_io::chunk_gates(p, c0, L, hv, lane, Gs, Es, Ls, Bs);
    __syncthreads();

    // ---- P1a: P = [q K^T] and A = [k K^T] on the lower triangle: 16 x 8 tiles (row tile rb,
    // column tile nb <= 2 rb + 1), 20 per matrix, spread over the warps. Entries above the diagonal
    // are selected away (a later token's k may be non-finite); P gets exact zeros there.
    for (int tt = warp; tt < 40; tt += NW) {
      const int which = tt / 20, u = tt % 20;
      const int rb = u < 2 ? 0 : u < 6 ? 1 : u < 12 ? 2 : 3;
      const int nb = u - (rb == 0 ? 0 : rb == 1 ? 2 : rb == 2 ? 6 : 12);
      float acc[4] = {};
      if constexpr (TWO) {
        const float* arow = (which == 0 ? Qs : Ks) + 16 * rb * LDK;
        const float* brow = Ks + 8 * nb * LDK;
#pragma unroll 4
        for (int kk = 0; kk < DK; kk += 16) {
          const Frag<4> a = a_rows(arow + kk, LDK, g, t, true);
          const Frag<2> bb = b_nk(brow + kk, LDK, g, t, true);
          mma_parts(acc, a, bb, true, true);
        }
      } else {
        const bf16* arow = (which == 0 ? Qh : Kh) + 16 * rb * LDK;
        const bf16* brow = Kh + 8 * nb * LDK;
#pragma unroll
        for (int kk = 0; kk < DK; kk += 32) {  // two k steps: one ldmatrix of B, two of A
          uint32_t bw[4];
          ldm_b2(bw, brow + kk, LDK, lane);
          mma::mma_bf16(acc, ldm_a(arow + kk, LDK, lane).hi, bw[0], bw[1]);
          mma::mma_bf16(acc, ldm_a(arow + kk + 16, LDK, lane).hi, bw[2], bw[3]);
        }
      }
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int r = 16 * rb + g + (q >= 2 ? 8 : 0), c = 8 * nb + 2 * t + (q & 1);
        const float w = c <= r ? expf(static_cast<float>(Gs[r] - Gs[c])) : 0.0f;  // never exp of a positive
        if (which == 0) {
          Ps[r * LDT + c] = c <= r ? (acc[q] * scale) * w : 0.0f;  // a select: acc may be NaN for a later token
        } else {
          Ts[r * LDT + c] = c < r ? Bs[r] * (acc[q] * w) : 0.0f;
        }
      }
    }
    // ---- P1b: [q; k] S. Rows 0..63 (q) give O = exp(G_r) S^T q'_r (kept in registers to P2),
    // rows 64..127 (k) give X = beta (v - exp(G) S^T k) over the v tile in Vs (each element read
    // and written by its own thread). Warp: WM1 row tiles mb (of 8) x WN1 column tiles from nbase.
    float o1[WM1][WN1][4] = {};
    {
      const int nbase = (warp / (8 / WM1)) * (8 * WN1);
      // Pass `lo` = false: the high part of q, k times both parts of S; pass true (two-part q, k
      // only): the low part of q, k times the high part of S. Two passes instead of the three
      // products per step keep the registers of one A fragment (one pass of three spilled).
      auto product = [&](auto lo_c) {
        constexpr bool kLo = decltype(lo_c)::value;
#pragma unroll 1
        for (int kk = 0; kk < DK; kk += 16) {
          Frag<2> bs[WN1];  // S, split once per block (each warp has its own columns)
#pragma unroll
          for (int nt = 0; nt < WN1; ++nt) bs[nt] = b_kn(Ss + kk * LDS + nbase + 8 * nt, LDS, g, t);
#pragma unroll
          for (int im = 0; im < WM1; ++im) {
            const int mb = warp % (8 / WM1) + im * (8 / WM1);
            Frag<4> a;
            if constexpr (TWO) {
              const float* arow = mb < 4 ? Qs + 16 * mb * LDK : Ks + 16 * (mb - 4) * LDK;
              a = a_rows(arow + kk, LDK, g, t, kLo);
            } else {
              a = ldm_a((mb < 4 ? Qh + 16 * mb * LDK : Kh + 16 * (mb - 4) * LDK) + kk, LDK, lane);
            }
#pragma unroll
            for (int nt = 0; nt < WN1; ++nt) {
              if constexpr (kLo) {
                mma::mma_bf16(o1[im][nt], a.lo, bs[nt].hi[0], bs[nt].hi[1]);
              } else {
                mma_parts(o1[im][nt], a, bs[nt], false, true);
              }
            }
          }
        }
      };
      if constexpr (TWO) product(std::true_type{});
      product(std::false_type{});
#pragma unroll
      for (int im = 0; im < WM1; ++im) {
        const int mb = warp % (8 / WM1) + im * (8 / WM1);
        if (mb < 4) continue;
#pragma unroll
        for (int nt = 0; nt < WN1; ++nt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 16 * (mb - 4) + g + 8 * h, j = nbase + 8 * nt + 2 * t;
            float x[2];
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              x[e] = Bs[r] * (Vs[r * LDS + j + e] - Es[r] * o1[im][nt][2 * h + e]);
              Vs[r * LDS + j + e] = x[e];
              if (!isfinite(x[e])) atomicMin(nfX + j + e, r);
            }
            if constexpr (!TWO) {
              uint32_t hi, lo;
              split(x[0], x[1], hi, lo);
              *reinterpret_cast<uint32_t*>(Xh + r * LDB + j) = hi;
              *reinterpret_cast<uint32_t*>(Xl + r * LDB + j) = lo;
            }
          }
        }
      }
      __syncthreads();
      // ---- P2: O -> Os (q is dead), so the inversion runs without these registers.
#pragma unroll
      for (int im = 0; im < WM1; ++im) {
        const int mb = warp % (8 / WM1) + im * (8 / WM1);
        if (mb >= 4) continue;
#pragma unroll
        for (int nt = 0; nt < WN1; ++nt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 16 * mb + g + 8 * h, j = nbase + 8 * nt + 2 * t;
            const float er = Es[r] * scale;
            *reinterpret_cast<float2*>(Os + r * LDS + j) =
                make_float2(o1[im][nt][2 * h] * er, o1[im][nt][2 * h + 1] * er);
          }
        }
      }
    }
    // P2: T = (I + A)^-1, exactly the chunked kernel's blockwise substitution.
    // Warp w < 2, lane c: column c of T_ww by forward substitution, t_r = [r == c] - sum_{m<r} A[r][m] t_m,
    // written TRANSPOSED into the upper triangle (diagonal included) of the same block.
    if (tid < 64) chunk_inverse::diagonal_blocks<LDT>(Ts, tid, lane);
    __syncthreads();
    chunk_inverse::off_diagonal<LDT, NT>(Ts, tid);  // M = A10 T00, then T10 = -T11 M
    __syncthreads();

    // ---- P3: V' = T X. Warp: row tile mb, columns nb3 .. nb3 + 31 (4 tiles of 8);
    // key tiles kb <= mb (the ones above the diagonal are skipped). On the diagonal tile T is
    // selected to 0 above the diagonal and non-finite X is read as 0 (a later token's NaN must
    // not reach an earlier row through 0 * NaN); rows at or past a column's first non-finite X
    // of that tile are then made NaN, as the plain product would.
    // Row tile mb = warp / (NW / 4): the warps of one scheduler (warp % 4) get different row tiles,
    // so the triangular work (mb + 1 key tiles) spreads over the schedulers.
    const int mb = warp / (NW / 4), nb3 = (warp % (NW / 4)) * 32;
    // B fragments of X (P3) or V' (P4) for key tile kb, column tiles nt and nt + 1 of this warp's
    // columns: from the f32 tile, split here (f32 inputs), or from the part tiles by ldmatrix.
    auto b_pair = [&](Frag<2>* bb, int kb, int nt, bool diag) {
      if constexpr (TWO) {
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const float* xb = Vs + 16 * kb * LDS + nb3 + 8 * (nt + u);
          bb[u] = diag ? b_kn_finite(xb, LDS, g, t) : b_kn(xb, LDS, g, t);
        }
      } else {
        uint32_t wh[4], wl[4];
        ldm_bt2(wh, Xh + 16 * kb * LDB + nb3 + 8 * nt, LDB, lane);
        ldm_bt2(wl, Xl + 16 * kb * LDB + nb3 + 8 * nt, LDB, lane);
        if (diag) {
#pragma unroll
          for (int u = 0; u < 4; ++u) zero_nonfinite(wh[u], wl[u]);
        }
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          bb[u].hi[0] = wh[2 * u];
          bb[u].hi[1] = wh[2 * u + 1];
          bb[u].lo[0] = wl[2 * u];
          bb[u].lo[1] = wl[2 * u + 1];
        }
      }
    };
    {
      float acc[4][4] = {};
      for (int kb = 0; kb <= mb; ++kb) {
        Frag<4> a;
        {
          const float* tr = Ts + 16 * mb * LDT + 16 * kb;
          const int rlo = g, rhi = g + 8, cl = 2 * t, ch = 2 * t + 8;  // within the tile
          const bool diag = kb == mb;
          const float2 x0 = ld2(tr + rlo * LDT + cl), x1 = ld2(tr + rhi * LDT + cl);
          const float2 x2 = ld2(tr + rlo * LDT + ch), x3 = ld2(tr + rhi * LDT + ch);
          auto sel = [&](float v, int r, int c) { return !diag || c <= r ? v : 0.0f; };
          put(a, 0, sel(x0.x, rlo, cl), sel(x0.y, rlo, cl + 1), true);
          put(a, 1, sel(x1.x, rhi, cl), sel(x1.y, rhi, cl + 1), true);
          put(a, 2, sel(x2.x, rlo, ch), sel(x2.y, rlo, ch + 1), true);
          put(a, 3, sel(x3.x, rhi, ch), sel(x3.y, rhi, ch + 1), true);
        }
#pragma unroll
        for (int nt = 0; nt < 4; nt += 2) {
          Frag<2> bb[2];
          b_pair(bb, kb, nt, kb == mb);
          mma_parts(acc[nt], a, bb[0], true, true);
          mma_parts(acc[nt + 1], a, bb[1], true, true);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = 16 * mb + g + (q >= 2 ? 8 : 0), j = nb3 + 8 * nt + 2 * t + (q & 1);
          const int f = nfX[j];
          if (f >= 16 * mb && f <= r) acc[nt][q] = __int_as_float(0x7fc00000);
        }
      }
      __syncthreads();  // every warp has read X
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int r = 16 * mb + g + (q >= 2 ? 8 : 0), j = nb3 + 8 * nt + 2 * t + (q & 1);
          Vs[r * LDS + j] = acc[nt][q];
          if (!isfinite(acc[nt][q])) atomicMin(nfV + j, r);
        }
        if constexpr (!TWO) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 16 * mb + g + 8 * h, j = nb3 + 8 * nt + 2 * t;
            uint32_t hi, lo;
            split(acc[nt][2 * h], acc[nt][2 * h + 1], hi, lo);
            *reinterpret_cast<uint32_t*>(Xh + r * LDB + j) = hi;
            *reinterpret_cast<uint32_t*>(Xl + r * LDB + j) = lo;
          }
        }
      }
    }
    __syncthreads();

    // ---- P4: o = O + P V' (the P3 layout; the diagonal tile as there), stored for rows < L.
    {
      float acc[4][4];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float2 o = ld2(Os + (16 * mb + g + 8 * h) * LDS + nb3 + 8 * nt + 2 * t);
          acc[nt][2 * h] = o.x;
          acc[nt][2 * h + 1] = o.y;
        }
      }
      for (int kb = 0; kb <= mb; ++kb) {
        const Frag<4> a = a_rows(Ps + 16 * mb * LDT + 16 * kb, LDT, g, t, true);  // zeros above the diagonal
#pragma unroll
        for (int nt = 0; nt < 4; nt += 2) {
          Frag<2> bb[2];
          b_pair(bb, kb, nt, kb == mb);
          mma_parts(acc[nt], a, bb[0], true, true);
          mma_parts(acc[nt + 1], a, bb[1], true, true);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = 16 * mb + g + 8 * h, j = nb3 + 8 * nt + 2 * t;
          float x = acc[nt][2 * h], y = acc[nt][2 * h + 1];
          const int f0 = nfV[j], f1 = nfV[j + 1];
          if (f0 >= 16 * mb && f0 <= r) x = __int_as_float(0x7fc00000);
          if (f1 >= 16 * mb && f1 <= r) y = __int_as_float(0x7fc00000);
          if constexpr (GN) {
            *reinterpret_cast<uint32_t*>(Ob + r * LDO + j) = bf16_pair(x, y);  // the bytes store2 would write
            continue;
          }
          if (r < L) store2(p.out, p.out_dtype, ((c0 + r) * Hv + hv) * Dv + v0 + j, x, y, Dv - v0 - j, vec);
        }
      }
    }
    // S = exp(G_last) S + K^T (EL V'): warp w owns state columns 8w..8w+7, all DK rows; key tiles
    // up to the chunk's last token (rows past it are zero in K and V').
    {
      constexpr int MT = DK / 16;
      const float decay = Es[C - 1];  // exp(G_last)
      float acc[MT][4];
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float2 s = ld2(Ss + (16 * mi + g + 8 * h) * LDS + 8 * warp + 2 * t);
          acc[mi][2 * h] = s.x * decay;
          acc[mi][2 * h + 1] = s.y * decay;
        }
      }
      const int kbs = (L + 15) / 16;
      for (int kb = 0; kb < kbs; ++kb) {
        Frag<2> bb;
        {
          const int c = 16 * kb + 2 * t;
          const float* vb = Vs + c * LDS + 8 * warp + g;
          split(vb[0] * Ls[c], vb[LDS] * Ls[c + 1], bb.hi[0], bb.lo[0]);
          split(vb[8 * LDS] * Ls[c + 8], vb[9 * LDS] * Ls[c + 9], bb.hi[1], bb.lo[1]);
        }
#pragma unroll
        for (int mi = 0; mi < MT; ++mi) {
          // A = K^T: A[i][c] = K[c][i], rows i = 16 mi + g (+8), columns c = 16 kb + 2t (+1, +8, +9).
          Frag<4> a;
          if constexpr (TWO) {
            const float* kc = Ks + (16 * kb + 2 * t) * LDK + 16 * mi + g;
            put(a, 0, kc[0], kc[LDK], true);
            put(a, 1, kc[8], kc[LDK + 8], true);
            put(a, 2, kc[8 * LDK], kc[9 * LDK], true);
            put(a, 3, kc[8 * LDK + 8], kc[9 * LDK + 8], true);
          } else {
            a = ldm_at(Kh + 16 * kb * LDK + 16 * mi, LDK, lane);
          }
          mma_parts(acc[mi], a, bb, two, true);
        }
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          *reinterpret_cast<float2*>(Ss + (16 * mi + g + 8 * h) * LDS + 8 * warp + 2 * t) =
              make_float2(acc[mi][2 * h], acc[mi][2 * h + 1]);
        }
      }
    }
    __syncthreads();  // the next chunk overwrites K, Q, V, T, P, G; P1 reads every warp's S
    // GN: the chunk's rows normed from Ob (P4's stores are behind the barrier above; the next
    // chunk's P1 writes the T tile only after P0's barrier).
    if constexpr (GN) gated_out::norm_rows<BV, NT>(p, Ob, LDO, c0, L, hv, tid);
  }

  // The final state tile, written once (after the last barrier).
#pragma unroll
  for (int a = 0; a < RS; ++a) {
    const int i = rg * RS + a;
    store4(p.state, p.state_dtype, state_at + static_cast<int64_t>(i) * Dv + j0, ld4(Ss + i * LDS + j0), cols, vec);
  }
}

}  // namespace

namespace {
// The fused norm's conditions (DeltaRulePrefillParams::norm_w): the kernel's GN form.
void check_norm(LaunchCheck& chk, const DeltaRulePrefillParams& p, int dv_tile) {
  chk.require(p.qkv_dtype == DType::bf16 && p.out_dtype == DType::bf16, "a fused norm needs bf16 q, k, v and out");
  chk.require(delta_rule_prefill_mma_norm_built(p.Dv, DType::bf16, DType::bf16, dv_tile),
              "a fused norm needs Dv 64 or 128 in one Dv tile");
  chk.not_null(p.norm_z, "norm_z").not_null(p.norm_live, "norm_live").in_range(p.norm_rows, 0, INT32_MAX, "norm_rows");
  chk.require(p.norm_w_dtype == DType::f32 || p.norm_w_dtype == DType::bf16, "norm_w_dtype must be bf16 or f32");
  const int64_t zts = p.norm_z_stride ? p.norm_z_stride : static_cast<int64_t>(p.Hv) * p.Dv;
  chk.require(zts % 8 == 0 && dev::aligned16(p.norm_z) && dev::aligned16(p.norm_w) && dev::aligned16(p.out),
              "a fused norm needs 16-byte aligned out, norm_z and norm_w and a norm_z stride that is a multiple of 8");
  chk.require(p.max_seqs < static_cast<int>(kMaxGridYZ), "a fused norm needs max_seqs + 1 rows of blocks");
}
}  // namespace

cudaError_t delta_rule_prefill_mma(const DeltaRulePrefillParams& p, cudaStream_t stream, int dv_tile) {
  const bool gn = p.norm_w != nullptr;
  if (gn) {
    LaunchCheck chk("delta_rule.prefill (mma)");
    check_norm(chk, p, dv_tile);
    if (!chk.ok()) return cudaErrorInvalidValue;
  }
  return chunk_launch::checked_launch("delta_rule.prefill (mma)", p, dv_tile, [&](auto dk, auto bv, bool vec) {
    constexpr int DK = decltype(dk)::value, BV = decltype(bv)::value;
    auto go = [&](auto two, auto norm) {
      constexpr bool TWO = decltype(two)::value, GN = decltype(norm)::value;
      using Tl = MTile<DK, BV, TWO>;
      return chunk_launch::launch<BV>(delta_rule_mma_kernel<DK, BV, TWO, GN>, Tl::NT, Tl::bytes, p, vec, stream,
                                      GN ? 1 : 0);
    };
    // checked_launch has refused dtypes other than f32 and bf16; check_norm, a fused norm elsewhere
    if (p.qkv_dtype != DType::bf16) return go(std::true_type{}, std::false_type{});
    if constexpr (BV == 64 || BV == 128) {
      if (gn) return go(std::false_type{}, std::true_type{});
    }
    return go(std::false_type{}, std::false_type{});
  });
}

}  // namespace sg
