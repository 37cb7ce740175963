// rmsnorm.cu: zero-centred RMSNorm (optionally fused with the residual add) and the GDN gated
// RMSNorm. One kernel template for both: a row is owned by a warp (n <= 512) or a block.
#include "kernels/device_util.cuh"
#include "kernels/rmsnorm.h"

namespace sg {
namespace {

constexpr int kWarpRowMaxN = 512;   // n up to this: one warp per row
constexpr int kWarpRowBlock = 256;  // 8 rows per block in warp-per-row mode
constexpr int kMaxBlock = 1024;
constexpr int kReg = 8;             // elements per thread kept in registers between the passes

// Both ops mapped onto one argument set (z null for the plain norm, residual fields unused for
// the gated one).
struct NormArgs {
  const void* x;
  DType xt;
  int64_t x_ts, x_hs;  // token / head strides of x (elements)
  const void* res;     // [T, heads, n] or null
  void* res_out;       // [T, heads, n] or null
  DType rt;
  const void* z;       // gated only: [T, heads, n] with token stride z_ts
  DType zt;
  int64_t z_ts;
  const void* w;
  DType wt;
  void* y;             // [T, heads, n] contiguous
  DType yt;
  int T, heads, n;
  float eps;
  const int32_t* live;
};

// The value as stored in dtype t (f32: unchanged; bf16: rounded to nearest even).
__device__ __forceinline__ float round_to(DType t, float v) {
  return t == DType::bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

// Fixed butterfly over the warp; every lane ends with the same bits (IEEE add is commutative).
__device__ __forceinline__ float warp_sum(float s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// Block-wide sum in a fixed order: warp butterflies, then every warp reduces the warp partials
// with the same butterfly (so all threads get identical bits without a second barrier).
__device__ __forceinline__ float block_sum(float s, float* partial) {
  s = warp_sum(s);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
  if (lane == 0) partial[warp] = s;
  __syncthreads();
  return warp_sum(lane < nw ? partial[lane] : 0.0f);
}

template <bool kGated, bool kWarpRow>
__global__ void __launch_bounds__(kMaxBlock) norm_kernel(const NormArgs a) {
  __shared__ float partial[32];
  int64_t row;
  int lane, G;
  if constexpr (kWarpRow) {
    row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
    lane = threadIdx.x % 32;
    G = 32;
    if (row >= static_cast<int64_t>(a.T) * a.heads) return;  // whole warps
  } else {
    row = blockIdx.x;  // grid = T * heads exactly
    lane = threadIdx.x;
    G = blockDim.x;
  }
  const int t = static_cast<int>(row / a.heads), h = static_cast<int>(row % a.heads);
  const int64_t o0 = row * a.n;  // contiguous [T, heads, n] offset of y / residual / residual_out
  if (a.live && t >= *a.live) {  // padding token: defined zeros, nothing read
    for (int i = lane; i < a.n; i += G) {
      dev::store(a.y, a.yt, o0 + i, 0.0f);
      if (a.res_out) dev::store(a.res_out, a.rt, o0 + i, 0.0f);
    }
    return;
  }
  const int64_t x0 = static_cast<int64_t>(t) * a.x_ts + static_cast<int64_t>(h) * a.x_hs;
  const int64_t z0 = static_cast<int64_t>(t) * a.z_ts + static_cast<int64_t>(h) * a.n;
  // A thread owns elements i = lane + j * G. The first kReg of them stay in registers between the
  // passes, and every load of a pass is issued before any store of it: y, residual_out and x may
  // alias, so a load after a store could not be moved ahead of it, and a loop of load-store pairs
  // would pay one memory latency per element. The arithmetic and its order are the loop's
  // (pass 1 accumulates j = 0, 1, ... in order; pass 2 computes each element alone).
  float v[kReg];
  // Pass 1: sum of squares (of the rounded residual sum when fused, which is stored here).
#pragma unroll
  for (int j = 0; j < kReg; ++j) {
    const int i = lane + j * G;
    if (i < a.n) {
      v[j] = dev::load(a.x, a.xt, x0 + i);
      if (!kGated && a.res_out && a.res) v[j] = v[j] + dev::load(a.res, a.rt, o0 + i);
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < kReg; ++j) {
    const int i = lane + j * G;
    if (i < a.n) {
      if (!kGated && a.res_out) {
        v[j] = round_to(a.rt, v[j]);
        dev::store(a.res_out, a.rt, o0 + i, v[j]);
      }
      s = fmaf(v[j], v[j], s);
    }
  }
  for (int i = lane + kReg * G; i < a.n; i += G) {  // rows longer than kReg * G
    float u = dev::load(a.x, a.xt, x0 + i);
    if (!kGated && a.res_out) {
      if (a.res) u = u + dev::load(a.res, a.rt, o0 + i);
      u = round_to(a.rt, u);
      dev::store(a.res_out, a.rt, o0 + i, u);
    }
    s = fmaf(u, u, s);
  }
  s = kWarpRow ? warp_sum(s) : block_sum(s, partial);
  const float inv = 1.0f / sqrtf(s / static_cast<float>(a.n) + a.eps);
  // Pass 2: the same element-to-thread map (a thread only re-reads what it read or wrote itself,
  // which makes y == x and residual_out == x / residual aliasing safe). Weights and gates first.
  float wv[kReg], zv[kReg];
#pragma unroll
  for (int j = 0; j < kReg; ++j) {
    const int i = lane + j * G;
    if (i < a.n) {
      wv[j] = dev::load(a.w, a.wt, i);
      if constexpr (kGated) zv[j] = dev::load(a.z, a.zt, z0 + i);
    }
  }
#pragma unroll
  for (int j = 0; j < kReg; ++j) {
    const int i = lane + j * G;
    if (i < a.n) {
      const float yv = kGated ? (wv[j] * (v[j] * inv)) * dev::silu(zv[j]) : (v[j] * inv) * (1.0f + wv[j]);
      dev::store(a.y, a.yt, o0 + i, yv);
    }
  }
  for (int i = lane + kReg * G; i < a.n; i += G) {
    const float wi = dev::load(a.w, a.wt, i);
    float yv;
    if constexpr (kGated) {
      const float u = dev::load(a.x, a.xt, x0 + i);
      yv = (wi * (u * inv)) * dev::silu(dev::load(a.z, a.zt, z0 + i));
    } else {
      const float u = a.res_out ? dev::load(a.res_out, a.rt, o0 + i) : dev::load(a.x, a.xt, x0 + i);
      yv = (u * inv) * (1.0f + wi);
    }
    dev::store(a.y, a.yt, o0 + i, yv);
  }
}

bool float_type(DType t) { return t == DType::f32 || t == DType::bf16; }

template <bool kGated>
cudaError_t launch(const NormArgs& a, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(a.T) * a.heads;
  if (rows == 0) return cudaSuccess;
  if (a.n <= kWarpRowMaxN) {
    const int64_t per_block = kWarpRowBlock / 32;
    const int64_t blocks = (rows + per_block - 1) / per_block;
    if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
    norm_kernel<kGated, true><<<static_cast<unsigned>(blocks), kWarpRowBlock, 0, stream>>>(a);
  } else {
    if (rows > 0x7fffffff) return cudaErrorInvalidValue;
    const int want = (a.n + 7) / 8;
    const int block = want >= kMaxBlock ? kMaxBlock : (want + 31) / 32 * 32;
    norm_kernel<kGated, false><<<static_cast<unsigned>(rows), block, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t rmsnorm(const RmsNormParams& p, cudaStream_t stream) {
  if (!p.x || !p.w || !p.y || p.T < 0 || p.heads < 1 || p.n < 1 || !(p.eps >= 0.0f)) return cudaErrorInvalidValue;
  if (!float_type(p.x_dtype) || !float_type(p.w_dtype) || !float_type(p.y_dtype)) return cudaErrorInvalidValue;
  if (p.residual && !p.residual_out) return cudaErrorInvalidValue;
  if (p.residual_out && (!float_type(p.residual_dtype) || p.residual_out == p.y)) return cudaErrorInvalidValue;
  const int64_t hs = p.x_head_stride ? p.x_head_stride : p.n;
  const int64_t ts = p.x_token_stride ? p.x_token_stride : hs * p.heads;
  if (hs < p.n || ts < (p.heads - 1) * hs + p.n) return cudaErrorInvalidValue;
  NormArgs a{p.x, p.x_dtype, ts, hs, p.residual, p.residual_out, p.residual_dtype, nullptr, DType::f32, 0,
             p.w, p.w_dtype, p.y, p.y_dtype, p.T, p.heads, p.n, p.eps, p.live_rows};
  return launch<false>(a, stream);
}

cudaError_t gated_rmsnorm(const GatedRmsNormParams& p, cudaStream_t stream) {
  if (!p.x || !p.z || !p.w || !p.y || p.T < 0 || p.heads < 1 || p.n < 1 || !(p.eps >= 0.0f)) return cudaErrorInvalidValue;
  if (!float_type(p.x_dtype) || !float_type(p.z_dtype) || !float_type(p.w_dtype) || !float_type(p.y_dtype)) {
    return cudaErrorInvalidValue;
  }
  const int64_t row = static_cast<int64_t>(p.heads) * p.n;
  const int64_t xts = p.x_token_stride ? p.x_token_stride : row;
  const int64_t zts = p.z_token_stride ? p.z_token_stride : row;
  if (xts < row || zts < row) return cudaErrorInvalidValue;
  NormArgs a{p.x, p.x_dtype, xts, p.n, nullptr, nullptr, DType::f32, p.z, p.z_dtype, zts,
             p.w, p.w_dtype, p.y, p.y_dtype, p.T, p.heads, p.n, p.eps, p.live_rows};
  return launch<true>(a, stream);
}

}  // namespace sg
