// postconv_common.cuh: private to kernels/postconv*.cu. Device helpers shared by the post-conv arms
// (the gates, the one-warp L2 norm of a head row, the v copy) and the launchers of the arms that
// live in their own files (split in postconv_split.cu, token_tile in postconv_token_tile.cu); the
// dispatch table in postconv.cu calls those launchers.
//
// Reduction order (MODEL-MATH.md step 3, the byte contract): the sum of squares of a row of n
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

__device__ __forceinline__ void gate_finish(const PostconvParams& p, int t, int hv, const GateIn& in) {
  p.beta[static_cast<int64_t>(t) * p.Hv + hv] = 1.0f / (1.0f + expf(-in.b));
  p.g[static_cast<int64_t>(t) * p.Hv + hv] = -expf(in.A_log) * dev::softplus(in.a + in.dt_bias);
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
__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// dst[0..n) = src[0..n) converted (exact when the dtypes match; one rounding f32 -> bf16), by `nt`
// threads starting at `tid`. Same dtype, 16-byte aligned ends and a multiple of 16 bytes: 16-byte
// vectors, four loads in flight per thread before the stores; else element by element.
__device__ __forceinline__ void copy_row(const void* src, DType ts, int64_t src0, void* dst, DType td, int64_t dst0, int n,
                                         int tid, int nt) {
  const int64_t es = static_cast<int64_t>(dtype_size(ts));
  const char* s = static_cast<const char*>(src) + src0 * es;
  char* d = static_cast<char*>(dst) + dst0 * static_cast<int64_t>(dtype_size(td));
  const int64_t bytes = n * es;
  if (ts == td && aligned16(s) && aligned16(d) && bytes % 16 == 0) {
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

// --- launchers of the arms in their own files (contract already validated by postconv()) ----------------
cudaError_t launch_split(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream);
cudaError_t launch_token_tile(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream);

}  // namespace sg::postconv_detail
