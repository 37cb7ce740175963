// delta_rule_mma_frag.cuh: mma.sync m16n8k16 operand fragments for delta_rule_prefill_mma.cu, read
// from f32 shared tiles (an operand that is exactly bf16 is one part, any other is split into a high
// and a low bf16 part, mma::split_pair<2>, and multiplied as lo*hi + hi*lo + hi*hi) or from bf16
// part tiles by ldmatrix.
// Fragment layouts as in mma_util.cuh (g = lane / 4, t = lane % 4).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule_chunk_io.cuh"
#include "kernels/mma_util.cuh"

namespace sg::mma_frag {

using chunk_io::bf16_pair;
using chunk_io::ld2;

// An f32 pair as bf16 parts: hi = bf16(x, y); lo = bf16 of the (exact) residual.
__device__ __forceinline__ void split(float x, float y, uint32_t& hi, uint32_t& lo) {
  uint32_t w[2];
  mma::split_pair<2>(x, y, w);
  hi = w[0];
  lo = w[1];
}

// One operand fragment (4 words for A, 2 for B) in one or two bf16 parts.
template <int N>
struct Frag {
  uint32_t hi[N], lo[N];
};

// Sets fragment word u from the f32 pair (x, y): both parts, or the high part alone (exact operands).
template <int N>
__device__ __forceinline__ void put(Frag<N>& f, int u, float x, float y, bool two) {
  if (two) {
    split(x, y, f.hi[u], f.lo[u]);
  } else {
    f.hi[u] = bf16_pair(x, y);
  }
}

// c += a b over the parts: lo*hi + hi*lo + hi*hi (small terms first); a_two / b_two: the operand
// has a low part.
__device__ __forceinline__ void mma_parts(float* c, const Frag<4>& a, const Frag<2>& b, bool a_two, bool b_two) {
  if (a_two) mma::mma_bf16(c, a.lo, b.hi[0], b.hi[1]);
  if (b_two) mma::mma_bf16(c, a.hi, b.lo[0], b.lo[1]);
  mma::mma_bf16(c, a.hi, b.hi[0], b.hi[1]);
}

// A fragment (16 x 16) of a row-major f32 matrix at `a` (pitch ld): rows g, g+8, columns 2t.., 2t+8...
__device__ __forceinline__ Frag<4> a_rows(const float* a, int ld, int g, int t, bool two) {
  Frag<4> f;
  const float2 x0 = ld2(a + g * ld + 2 * t), x1 = ld2(a + (g + 8) * ld + 2 * t);
  const float2 x2 = ld2(a + g * ld + 2 * t + 8), x3 = ld2(a + (g + 8) * ld + 2 * t + 8);
  put(f, 0, x0.x, x0.y, two);
  put(f, 1, x1.x, x1.y, two);
  put(f, 2, x2.x, x2.y, two);
  put(f, 3, x3.x, x3.y, two);
  return f;
}

// B fragment (16 x 8) from a matrix stored [n][k] row-major (B[k][n] = m[n][k], pitch ld).
__device__ __forceinline__ Frag<2> b_nk(const float* m, int ld, int g, int t, bool two) {
  Frag<2> f;
  const float2 x0 = ld2(m + g * ld + 2 * t), x1 = ld2(m + g * ld + 2 * t + 8);
  put(f, 0, x0.x, x0.y, two);
  put(f, 1, x1.x, x1.y, two);
  return f;
}

// B fragment (16 x 8) from a matrix stored [k][n] row-major (pitch ld): rows 2t, 2t+1 (and +8), column g.
__device__ __forceinline__ Frag<2> b_kn(const float* m, int ld, int g, int t) {
  Frag<2> f;
  const float* c = m + 2 * t * ld + g;
  split(c[0], c[ld], f.hi[0], f.lo[0]);
  split(c[8 * ld], c[9 * ld], f.hi[1], f.lo[1]);
  return f;
}

// As b_kn, with non-finite values read as 0 (the diagonal tile of a causal product: see P3).
__device__ __forceinline__ float fin(float x) { return isfinite(x) ? x : 0.0f; }
__device__ __forceinline__ Frag<2> b_kn_finite(const float* m, int ld, int g, int t) {
  Frag<2> f;
  const float* c = m + 2 * t * ld + g;
  split(fin(c[0]), fin(c[ld]), f.hi[0], f.lo[0]);
  split(fin(c[8 * ld]), fin(c[9 * ld]), f.hi[1], f.lo[1]);
  return f;
}

// Fragments of bf16 shared tiles (row pitch ld elements, 16-byte aligned rows) by ldmatrix:
// A (16 x 16) of a row-major tile at `a` (rows g, g+8, columns 2t.., 2t+8..; the high part only).
__device__ __forceinline__ Frag<4> ldm_a(const __nv_bfloat16* a, int ld, int lane) {
  Frag<4> f;
  mma::ldmatrix_x4(f.hi, static_cast<uint32_t>(__cvta_generic_to_shared(a + (lane & 15) * ld + 8 * (lane >> 4))));
  return f;
}
// Two B fragments (16 x 8 each, k steps at columns 0 and 16) of a tile stored [n][k] at `m`: w[0], w[1]
// the first, w[2], w[3] the second.
__device__ __forceinline__ void ldm_b2(uint32_t* w, const __nv_bfloat16* m, int ld, int lane) {
  mma::ldmatrix_x4(w, static_cast<uint32_t>(__cvta_generic_to_shared(m + (lane & 7) * ld + 8 * (lane >> 3))));
}
// A (16 x 16) of the transpose of a tile stored [c][i] at `m`: A[i][c] = m[c][i] (ldmatrix .trans).
__device__ __forceinline__ Frag<4> ldm_at(const __nv_bfloat16* m, int ld, int lane) {
  Frag<4> f;
  const int q = lane >> 3;  // matrix q: rows c 8 (q / 2) .., columns i 8 (q % 2) ..
  mma::ldmatrix_x4_trans(
      f.hi, static_cast<uint32_t>(__cvta_generic_to_shared(m + ((lane & 7) + 8 * (q >> 1)) * ld + 8 * (q & 1))));
  return f;
}

// Two B fragments (16 x 8 each: columns n0 .. n0 + 7 and n0 + 8 ..) of a tile stored [k][n] at `m`
// (rows k 0..15 from m): w[0], w[1] the first, w[2], w[3] the second (ldmatrix .trans).
__device__ __forceinline__ void ldm_bt2(uint32_t* w, const __nv_bfloat16* m, int ld, int lane) {
  const int q = lane >> 3;  // matrix q: rows k 8 (q % 2) .., columns n 8 (q / 2) ..
  mma::ldmatrix_x4_trans(
      w, static_cast<uint32_t>(__cvta_generic_to_shared(m + ((lane & 7) + 8 * (q & 1)) * ld + 8 * (q >> 1))));
}
// The diagonal tile of a causal product reads non-finite values as 0 (b_kn_finite): a value x was
// non-finite exactly when its high or low part is NaN (NaN: high NaN; +-Inf: low Inf - Inf = NaN;
// a finite x whose high part overflows to Inf keeps a low part of -Inf, not NaN), so both parts
// of such a value become 0, as the split of 0 gives.
__device__ __forceinline__ void zero_nonfinite(uint32_t& hi, uint32_t& lo) {
  auto nan16 = [](uint32_t w, int sh) { return ((w >> sh) & 0x7fffu) > 0x7f80u; };
  uint32_t keep = 0xffffffffu;
  if (nan16(hi, 0) || nan16(lo, 0)) keep &= 0xffff0000u;
  if (nan16(hi, 16) || nan16(lo, 16)) keep &= 0x0000ffffu;
  hi &= keep;
  lo &= keep;
}

}  // namespace sg::mma_frag
