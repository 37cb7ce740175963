// postconv_common.cuh: private to kernels/postconv*.cu, gdn_prefill_fused.cu and gdn_decode_prep.cu. Device helpers
// shared by the post-conv arms (the gates, the one-warp L2 norm of a head row, the v copy, the
// eight-elements-per-lane row I/O and 16-lane tree of token_tile, which gdn_prefill_fused reuses)
// and the launchers of the arms that live in their own files (split in postconv_split.cu,
// token_tile in postconv_token_tile.cu); the dispatch table in postconv.cu calls those launchers.
//
// Reduction order (docs/MODEL.md step 3, the byte contract): the sum of squares of a row of n
// features is the tree over P = next_pow2(n) (zeros beyond n): s[i] = s[i] + s[i + h] for
// h = P/2, ..., 1. megablock computes it in shared memory (the reference); every helper here
// computes the same additions on the same operands, so every arm's bytes equal megablock's.
#pragma once
#include <cstdint>

#include "kernels/device_util.cuh"
#include "kernels/postconv.h"

namespace sg::postconv_detail {

constexpr int kMaxD = kPostconvMaxD;  // 256
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ int next_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// --- gates ------------------------------------------------------------------------------------------
// beta[t, hv] = 1 / (1 + expf(-b)); g[t, hv] = -expf(A_log[hv]) * softplus(a + dt_bias[hv]).
// Split into a load and a finish so callers can keep the loads in flight with other work.
struct GateIn {
  float a, b, A_log, dt_bias;
};

__device__ __forceinline__ GateIn gate_load(const PostconvParams& p, int t, int hv) {
  return GateIn{dev::load(p.a, p.ab_dtype, static_cast<int64_t>(t) * p.a_stride + hv),
                dev::load(p.b, p.ab_dtype, static_cast<int64_t>(t) * p.b_stride + hv), p.A_log[hv], p.dt_bias[hv]};
}

// The two gate formulas on values (shared with gdn_prefill_fused).
__device__ __forceinline__ float gate_beta(float b) { return 1.0f / (1.0f + expf(-b)); }
__device__ __forceinline__ float gate_g(float a, float A_log, float dt_bias) {
  return -expf(A_log) * dev::softplus(a + dt_bias);
}

__device__ __forceinline__ void gate_finish(const PostconvParams& p, int t, int hv, const GateIn& in) {
  p.beta[static_cast<int64_t>(t) * p.Hv + hv] = gate_beta(in.b);
  p.g[static_cast<int64_t>(t) * p.Hv + hv] = gate_g(in.a, in.A_log, in.dt_bias);
}

__device__ __forceinline__ void gates_one(const PostconvParams& p, int t, int hv) {
  gate_finish(p, t, hv, gate_load(p, t, hv));
}

// --- one warp, one head row, any n <= 256 ------------------------------------------------------------
// Lane l holds features f = l + 32 j (slot j < 8; zeros for f >= n). With P = next_pow2(n):
//   tree levels h >= 32 pair f = l + 32 j with f + h = l + 32 (j + h/32): slot j += slot j + h/32, in
//   the lane (for n = 128: s0 = x0^2 + x2^2, s1 = x1^2 + x3^2, then s0 + s1);
//   levels h < 32 pair lane l with lane l + h: a butterfly __shfl_xor(h). By induction lane l then
//   holds the tree value s_h[l mod h] (it held s_2h[l mod 2h], its partner s_2h[(l ^ h) mod 2h], and
//   those are s_2h[l mod h] and s_2h[l mod h + h]; f32 addition is commutative), so after h = 1
//   every lane holds the tree's s[0]. For P < 32 only lanes < P matter and l ^ h stays below P.
// Then inv = 1 / sqrtf(sum + 1e-6) and out[f] = x[f] * inv, rounded once to the output dtype.
__device__ __forceinline__ void warp_l2norm_row(const void* in, DType in_t, int64_t in0,  // [n] at in0
                                                void* out, DType out_t, int64_t out0,     // [n] at out0
                                                int n, int lane) {
  float x[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int f = lane + 32 * j;
    x[j] = f < n ? dev::load(in, in_t, in0 + f) : 0.0f;
  }
  float s[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) s[j] = x[j] * x[j];
  const int P = next_pow2(n);
#pragma unroll
  for (int hs = 4; hs >= 1; hs >>= 1) {  // h = 32 * hs = 128, 64, 32
    if (64 * hs <= P) {
#pragma unroll
      for (int j = 0; j < hs; ++j) s[j] = s[j] + s[j + hs];
    }
  }
  float sum = s[0];
#pragma unroll
  for (int h = 16; h >= 1; h >>= 1) {
    if (h < P) sum = sum + __shfl_xor_sync(kFullMask, sum, h);  // P is warp-uniform
  }
  const float inv = 1.0f / sqrtf(sum + 1e-6f);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int f = lane + 32 * j;
    if (f < n) dev::store(out, out_t, out0 + f, x[j] * inv);
  }
}

// --- v copy ---------------------------------------------------------------------------------------------

// dst[0..n) = src[0..n) converted (exact when the dtypes match; one rounding f32 -> bf16), by `nt`
// threads starting at `tid`. Same dtype, 16-byte aligned ends and a multiple of 16 bytes: 16-byte
// vectors, four loads in flight per thread before the stores; else element by element.
__device__ __forceinline__ void copy_row(const void* src, DType ts, int64_t src0, void* dst, DType td, int64_t dst0,
                                         int n, int tid, int nt) {
  const int64_t es = static_cast<int64_t>(dtype_size(ts));
  const char* s = static_cast<const char*>(src) + src0 * es;
  char* d = static_cast<char*>(dst) + dst0 * static_cast<int64_t>(dtype_size(td));
  const int64_t bytes = n * es;
  if (ts == td && dev::aligned16(s) && dev::aligned16(d) && bytes % 16 == 0) {
    const auto* s4 = reinterpret_cast<const uint4*>(s);
    auto* d4 = reinterpret_cast<uint4*>(d);
    const int n16 = static_cast<int>(bytes / 16);
    for (int base = tid; base < n16; base += 4 * nt) {
      uint4 r[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (base + u * nt < n16) r[u] = __ldg(s4 + base + u * nt);
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        if (base + u * nt < n16) d4[base + u * nt] = r[u];
      }
    }
    return;
  }
  for (int i = tid; i < n; i += nt) dev::copy(dst, td, dst0 + i, src, ts, src0 + i);
}

// q and k head h of token t, by warps 0 (q) and 1 (k) of the block (the fast and split arms).
__device__ __forceinline__ void qk_head_two_warps(const PostconvParams& p, int t, int h, int warp, int lane) {
  if (warp >= 2) return;
  const int64_t col0 = (warp == 0 ? 0 : static_cast<int64_t>(p.Hk) * p.Dk) + static_cast<int64_t>(h) * p.Dk;
  warp_l2norm_row(p.conv, p.conv_dtype, static_cast<int64_t>(t) * p.conv_stride + col0, warp == 0 ? p.q : p.k,
                  p.qkv_dtype, (static_cast<int64_t>(t) * p.Hk + h) * p.Dk, p.Dk, lane);
}

// --- eight consecutive elements per lane (token_tile, gdn_prefill_fused) ------------------------------
// Eight consecutive elements of one row, exactly as stored.
template <DType T>
struct Raw8;
template <>
struct Raw8<DType::bf16> {
  uint4 u;  // element 2k in the low half of word k, 2k + 1 in the high half
};
template <>
struct Raw8<DType::f32> {
  float4 lo, hi;
};

// Elements [i, i + 8) of `base`. kVec: 16-byte loads (the caller guarantees alignment).
template <DType T, bool kVec>
__device__ __forceinline__ Raw8<T> load8(const void* base, int64_t i) {
  Raw8<T> r;
  if constexpr (T == DType::bf16) {
    const auto* p = static_cast<const uint16_t*>(base) + i;
    if constexpr (kVec) {
      r.u = __ldg(reinterpret_cast<const uint4*>(p));
    } else {
      uint32_t w[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) w[k] = static_cast<uint32_t>(p[2 * k]) | (static_cast<uint32_t>(p[2 * k + 1]) << 16);
      r.u = make_uint4(w[0], w[1], w[2], w[3]);
    }
  } else {
    const float* p = static_cast<const float*>(base) + i;
    if constexpr (kVec) {
      r.lo = __ldg(reinterpret_cast<const float4*>(p));
      r.hi = __ldg(reinterpret_cast<const float4*>(p) + 1);
    } else {
      r.lo = make_float4(p[0], p[1], p[2], p[3]);
      r.hi = make_float4(p[4], p[5], p[6], p[7]);
    }
  }
  return r;
}

// bf16 -> f32 is exact (the bits shifted into the high half), as __bfloat162float.
__device__ __forceinline__ void to_f32(const Raw8<DType::bf16>& r, float (&x)[8]) {
  const uint32_t w[4] = {r.u.x, r.u.y, r.u.z, r.u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    x[2 * k] = __uint_as_float(w[k] << 16);
    x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
__device__ __forceinline__ void to_f32(const Raw8<DType::f32>& r, float (&x)[8]) {
  x[0] = r.lo.x, x[1] = r.lo.y, x[2] = r.lo.z, x[3] = r.lo.w;
  x[4] = r.hi.x, x[5] = r.hi.y, x[6] = r.hi.z, x[7] = r.hi.w;
}

// Stores the raw elements [i, i + 8) of `base` (a same-dtype copy: exact).
template <DType T, bool kVec>
__device__ __forceinline__ void store_raw8(void* base, int64_t i, const Raw8<T>& r) {
  if constexpr (T == DType::bf16) {
    auto* p = static_cast<uint16_t*>(base) + i;
    if constexpr (kVec) {
      *reinterpret_cast<uint4*>(p) = r.u;
    } else {
      const uint32_t w[4] = {r.u.x, r.u.y, r.u.z, r.u.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        p[2 * k] = static_cast<uint16_t>(w[k] & 0xffffu);
        p[2 * k + 1] = static_cast<uint16_t>(w[k] >> 16);
      }
    }
  } else {
    float* p = static_cast<float*>(base) + i;
    if constexpr (kVec) {
      reinterpret_cast<float4*>(p)[0] = r.lo;
      reinterpret_cast<float4*>(p)[1] = r.hi;
    } else {
      p[0] = r.lo.x, p[1] = r.lo.y, p[2] = r.lo.z, p[3] = r.lo.w;
      p[4] = r.hi.x, p[5] = r.hi.y, p[6] = r.hi.z, p[7] = r.hi.w;
    }
  }
}

// y[0..8) as stored in dtype T, rounding once to nearest even for bf16 (the paired conversion
// rounds each element exactly as __float2bfloat16_rn, dev::store's rounding).
template <DType T>
__device__ __forceinline__ Raw8<T> pack8(const float (&y)[8]) {
  Raw8<T> r;
  if constexpr (T == DType::bf16) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __nv_bfloat162 h2 = __floats2bfloat162_rn(y[2 * k], y[2 * k + 1]);  // .x low, .y high
      w[k] =
          static_cast<uint32_t>(__bfloat16_as_ushort(h2.x)) | (static_cast<uint32_t>(__bfloat16_as_ushort(h2.y)) << 16);
    }
    r.u = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    r.lo = make_float4(y[0], y[1], y[2], y[3]);
    r.hi = make_float4(y[4], y[5], y[6], y[7]);
  }
  return r;
}

// Stores y[0..8) as elements [i, i + 8) of `base`, rounded as pack8.
template <DType T, bool kVec>
__device__ __forceinline__ void store8(void* base, int64_t i, const float (&y)[8]) {
  store_raw8<T, kVec>(base, i, pack8<T>(y));
}

// The tree sum of sq[0..8) over the 16 lanes of this lane's half-warp, returned in every lane of
// the half; lane m of the half holds features 8m .. 8m+7 of a 128-feature row. It performs exactly
// the reference tree's additions (s[i] += s[i + h], h = 64 .. 1; the proof is in the header of
// postconv_token_tile.cu). All 32 lanes must call it (shuffle offsets < 16: the halves are
// independent rows).
__device__ __forceinline__ float tree_sum_128_by8(const float (&sq)[8], int lane) {
  const bool b3 = lane & 8, b2 = lane & 4, b1 = lane & 2;
  float s4[4];  // h = 64: keep e2 = b3
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float keep = b3 ? sq[j + 4] : sq[j];
    const float send = b3 ? sq[j] : sq[j + 4];
    s4[j] = keep + __shfl_xor_sync(kFullMask, send, 8);
  }
  float s2[2];  // h = 32: keep e1 = b2
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float keep = b2 ? s4[j + 2] : s4[j];
    const float send = b2 ? s4[j] : s4[j + 2];
    s2[j] = keep + __shfl_xor_sync(kFullMask, send, 4);
  }
  // h = 16: keep e0 = b1
  float s = (b1 ? s2[1] : s2[0]) + __shfl_xor_sync(kFullMask, b1 ? s2[0] : s2[1], 2);
  s = s + __shfl_xor_sync(kFullMask, s, 1);  // h = 8
  s = s + __shfl_xor_sync(kFullMask, s, 8);  // h = 4
  s = s + __shfl_xor_sync(kFullMask, s, 4);  // h = 2
  s = s + __shfl_xor_sync(kFullMask, s, 2);  // h = 1
  return s;
}

// --- launchers of the arms in their own files (contract already validated by postconv()) ----------------
cudaError_t launch_split(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream);
cudaError_t launch_token_tile(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream);

}  // namespace sg::postconv_detail
