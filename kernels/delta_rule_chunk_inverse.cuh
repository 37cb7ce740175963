// delta_rule_chunk_inverse.cuh: T = (I + A)^-1 of one 64-token chunk, A strictly lower
// triangular (64 x 64 f32 in shared memory, row pitch LDT), for the chunked delta-rule prefill
// kernels (delta_rule_prefill_chunked.cu, delta_rule_prefill_mma.cu, delta_rule_prefill_wgmma.cu)
// on the CUDA cores, blockwise: the two 32 x 32 diagonal blocks by forward substitution
// (diagonal_blocks; the wgmma kernel: four 16 x 16 blocks, diagonal_blocks16, merged by merge16),
// then T10 = -T11 A10 T00 (off_diagonal). Explicit fmaf chains in a fixed order (bytes independent
// of the block size).
#pragma once
#include <cuda_runtime.h>

#include "kernels/delta_rule_chunk_io.cuh"

namespace sg::chunk_inverse {

// Column c (c < NB) of the NB x NB diagonal block at (base, base) by forward substitution,
// t_r = [r == c] - sum_{m<r} A[r][m] t_m, written TRANSPOSED into the block's upper triangle
// (diagonal included): T[r][c] at (base + c, base + r), r >= c; the strictly lower triangle still
// holds A for the other lanes. Lanes c >= NB of the warp read along and write nothing.
template <int LDT, int NB>
__device__ __forceinline__ void substitute(float* Ts, int base, int c) {
  using chunk_io::ld4;
  float tc[NB];
#pragma unroll
  for (int r = 0; r < NB; ++r) {
    const float* arow = Ts + (base + r) * LDT + base;  // A[base + r][base + m]
    float acc = 0.0f;
#pragma unroll
    for (int m = 0; m < r; m += 4) {
      const float4 a = ld4(arow + m);  // may read past m = r - 1: those are not used
      acc = fmaf(a.x, tc[m], acc);
      if (m + 1 < r) acc = fmaf(a.y, tc[m + 1], acc);
      if (m + 2 < r) acc = fmaf(a.z, tc[m + 2], acc);
      if (m + 3 < r) acc = fmaf(a.w, tc[m + 3], acc);
    }
    tc[r] = r < c ? 0.0f : (r == c ? 1.0f : -acc);
  }
  __syncwarp();  // every lane of this block has read A before any writes the upper triangle
  if (NB == 32 || c < NB) {
#pragma unroll
    for (int r = 0; r < NB; ++r) {
      if (r >= c) Ts[(base + c) * LDT + base + r] = tc[r];
    }
  }
}

// Threads 0..63 only (warp w < 2, lane c): the two 32 x 32 diagonal blocks, warp w block w
// (substitute).
template <int LDT>
__device__ __forceinline__ void diagonal_blocks(float* Ts, int tid, int lane) {
  substitute<LDT, 32>(Ts, tid & 32, lane);
}

// Threads 0..127 (warp w < 4; lanes 0..15 compute, 16..31 read along): the four 16 x 16 diagonal
// blocks, warp w block w, into the same transposed form; the chains are half as long as
// diagonal_blocks'. Then merge16 makes the two 32 x 32 diagonal blocks' T (the same convention), so
// that off_diagonal can follow.
template <int LDT>
__device__ __forceinline__ void diagonal_blocks16(float* Ts, int tid, int lane) {
  substitute<LDT, 16>(Ts, 16 * (tid >> 5), lane);
}

// 128 threads, after a barrier that follows diagonal_blocks16: for each 32 x 32 diagonal block
// (rows and columns 32 w ..; its 16 x 16 halves a = 2 w, b = 2 w + 1) T10 = -T_bb A_ba T_aa, written
// transposed into the block's upper-right quadrant, so that the block's upper triangle holds its T
// transposed, as diagonal_blocks leaves it. M = A_ba T_aa goes through that quadrant first. Holds
// two barriers (`bar`); its writes need one more before off_diagonal. A thread takes row r and the
// columns c0, c0 + 4, c0 + 8, c0 + 12 (c0 = i % 4: a warp's four column groups read T_aa rows next to
// each other, distinct banks at a pitch of 4 mod 32); in M the exact zero terms m < c are left out
// (off_diagonal says why the bytes stay the same). Its rows in T10 stay as they are: a thread taking
// rows p and 15 - p spilled the two-v-head T kernel's registers (28 bytes).
template <int LDT, typename Barrier>
__device__ __forceinline__ void merge16(float* Ts, int tid, Barrier bar) {
  const int w = tid >> 6, i = tid & 63;  // block w
  const int a = 32 * w, b = a + 16;
  const int r = i >> 2, c0 = i & 3;
  {  // M[r][c] = sum_{m >= c} A[b + r][a + m] T_aa[m][c], T_aa[m][c] from (a + c, a + m): into (a + r, b + c).
    float acc[4] = {};
#pragma unroll
    for (int m = 0; m < 16; ++m) {
      const float x = Ts[(b + r) * LDT + a + m];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int c = c0 + 4 * j;
        if (m < 4 * j) continue;  // c > m: a zero term
        // m >= 4 j + 3 >= c is known when unrolled: no select there.
        acc[j] = fmaf(x, m >= 4 * j + 3 || m >= c ? Ts[(a + c) * LDT + a + m] : 0.0f, acc[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) Ts[(a + r) * LDT + b + c0 + 4 * j] = acc[j];
  }
  bar();
  // T10[r][c] = -sum_{m <= r} T_bb[r][m] M[m][c], T_bb[r][m] from (b + m, b + r).
  float t10[4] = {};
  for (int m = 0; m <= r; ++m) {
    const float t = Ts[(b + m) * LDT + b + r];
#pragma unroll
    for (int j = 0; j < 4; ++j) t10[j] = fmaf(t, Ts[(a + m) * LDT + b + c0 + 4 * j], t10[j]);
  }
  bar();  // every thread has read M
  // T[b + r][a + c] transposed: at (a + c, b + r).
#pragma unroll
  for (int j = 0; j < 4; ++j) Ts[(a + c0 + 4 * j) * LDT + b + r] = -t10[j];
}

// The block-wide barrier off_diagonal holds by default.
struct BlockBarrier {
  __device__ __forceinline__ void operator()() const { __syncthreads(); }
};

// NT threads (tid 0 .. NT - 1: every thread of the block, or of the group that `bar` synchronises),
// after a barrier that follows diagonal_blocks; it holds one barrier (`bar`) itself, and its writes
// need one more before T is read. Afterwards T[r][c] is right for c <= r; above the diagonal is
// garbage, which the callers never use. kRowGroups (NT == 128 only): each thread computes 8 outputs
// at once (independent chains sharing their loads) instead of one output at a time. In M, one row r
// and the columns c0 + 4 i (c0 = tid % 4: a quarter warp's float4 reads of T00 columns fall in
// distinct banks at a row pitch of 4 mod 32), the terms m < c, which are exact zeros, left out: an
// accumulator starts at +0.0f and so is never -0, and fmaf(a, 0, acc) is acc for a finite a (A is
// finite where the chunk's inputs are; a non-finite one now spreads to fewer of its later rows).
// That halves M's loads and fmafs. In T10, rows p and 31 - p (p = tid / 8), four columns each, so
// that every thread takes 33 steps. Every output's nonzero fmafs are the same, in the same order,
// so are the bytes.
template <int LDT, int NT, typename Barrier = BlockBarrier, bool kRowGroups = false>
__device__ __forceinline__ void off_diagonal(float* Ts, int tid, Barrier bar = {}) {
  static_assert(!kRowGroups || NT == 128, "row groups: 128 threads, 8 outputs each");
  using chunk_io::ld4;
  // M = A10 T00 [32, 32] into the upper-right block (rows 0..31, columns 32..63):
  // M[r][c] = sum_{m >= c} A[32 + r][m] T00[m][c], T00[m][c] read from its transposed copy (c, m).
  if constexpr (kRowGroups) {
    const int r = tid >> 2, c0 = tid & 3;
    const float* arow = Ts + (32 + r) * LDT;  // A10 row r
    float acc[8] = {};
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // m = 4 j .. 4 j + 3
      const int m = 4 * j;
      const float4 a = ld4(arow + m);
#pragma unroll
      for (int i = 0; i <= j; ++i) {  // i > j: c > m + 3, four zero terms, left out
        const int c = c0 + 4 * i;
        const float4 t = ld4(Ts + c * LDT + m);  // T00 column c (transposed), valid at m >= c
        if (i < j) {                             // m >= 4 i + 4 > c: four valid terms
          acc[i] = fmaf(a.x, t.x, acc[i]);
          acc[i] = fmaf(a.y, t.y, acc[i]);
          acc[i] = fmaf(a.z, t.z, acc[i]);
          acc[i] = fmaf(a.w, t.w, acc[i]);
        } else {
          acc[i] = fmaf(a.x, m >= c ? t.x : 0.0f, acc[i]);
          acc[i] = fmaf(a.y, m + 1 >= c ? t.y : 0.0f, acc[i]);
          acc[i] = fmaf(a.z, m + 2 >= c ? t.z : 0.0f, acc[i]);
          acc[i] = fmaf(a.w, m + 3 >= c ? t.w : 0.0f, acc[i]);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) Ts[r * LDT + 32 + c0 + 4 * i] = acc[i];
  } else {
    for (int o = tid; o < 32 * 32; o += NT) {
      const int r = o >> 5, c = o & 31;
      const float* arow = Ts + (32 + r) * LDT;  // A10 row r
      const float* tcol = Ts + c * LDT;         // T00 column c (transposed), valid at m >= c
      float acc = 0.0f;
#pragma unroll
      for (int m = 0; m < 32; m += 4) {
        const float4 a = ld4(arow + m), t = ld4(tcol + m);
        acc = fmaf(a.x, m >= c ? t.x : 0.0f, acc);
        acc = fmaf(a.y, m + 1 >= c ? t.y : 0.0f, acc);
        acc = fmaf(a.z, m + 2 >= c ? t.z : 0.0f, acc);
        acc = fmaf(a.w, m + 3 >= c ? t.w : 0.0f, acc);
      }
      Ts[r * LDT + 32 + c] = acc;
    }
  }
  bar();
  // T10 = -T11 M over A10 (rows 32..63, columns 0..31): T10[r][c] = -sum_{m <= r} T11[r][m] M[m][c],
  // T11[r][m] from its transposed copy (32 + m, 32 + r). Then the diagonal blocks' strictly lower
  // triangles get T (natural layout) from the transposed copies. Afterwards T[r][c] is right for
  // c <= r.
  if constexpr (kRowGroups) {
    // Rows p and 31 - p (p = tid / 8), columns 4 q .. 4 q + 3 (q = tid % 8): 33 steps for every
    // thread (rows of 8 w .. 8 w + 7 a warp took up to 32 steps in the last warp and 8 in the first).
    const int p = tid >> 3, c = 4 * (tid & 7);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = h == 0 ? p : 31 - p;
      float acc[4] = {};
#pragma unroll 1
      for (int m = 0; m <= r; ++m) {
        const float t = Ts[(32 + m) * LDT + 32 + r];
        const float4 x = ld4(Ts + m * LDT + 32 + c);
        acc[0] = fmaf(t, x.x, acc[0]);
        acc[1] = fmaf(t, x.y, acc[1]);
        acc[2] = fmaf(t, x.z, acc[2]);
        acc[3] = fmaf(t, x.w, acc[3]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) Ts[(32 + r) * LDT + c + i] = -acc[i];
    }
  } else {
    for (int o = tid; o < 32 * 32; o += NT) {
      const int r = o >> 5, c = o & 31;
      float acc = 0.0f;
      for (int m = 0; m <= r; ++m) acc = fmaf(Ts[(32 + m) * LDT + 32 + r], Ts[m * LDT + 32 + c], acc);
      Ts[(32 + r) * LDT + c] = -acc;
    }
  }
  // Each pair {i, j} (i < j) of a diagonal block once: a warp's lane c takes the pair (c, c + k mod 32)
  // for an offset k = 1 .. 16 (k = 16: lanes below 16 only, the other half is the same pairs), so no
  // lane idles on the pairs that the other orientation covers. At a row pitch of 4 mod 32 a warp's
  // reads and writes fall at banks 5 c + k or 5 c + 4 k: at most two lanes a bank.
  static_assert(NT % 32 == 0, "whole warps");
  const int lane = tid & 31;
  for (int it = tid >> 5; it < 2 * 16; it += NT / 32) {  // it: block it / 16, offset it % 16 + 1
    const int base = (it >> 4) * 32, k = (it & 15) + 1, j = (lane + k) & 31;
    if (k == 16 && lane >= 16) continue;
    const int lo = lane < j ? lane : j, hi = lane < j ? j : lane;
    Ts[(base + hi) * LDT + base + lo] = Ts[(base + lo) * LDT + base + hi];
  }
}

}  // namespace sg::chunk_inverse
