// device_util.cuh: small device helpers shared by the kernels: dtype-dispatched loads and stores
// (f32 math everywhere, one rounding when storing), the activation functions of the contract, and
// the launchers' dynamic-shared-memory opt-in.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/numeric.h"

namespace sg::dev {

// True when p is 16-byte aligned (the 16-byte vector paths; host launchers and device code alike).
__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Reads element i of a buffer of type `t` (f32 or bf16) as f32.
__device__ __forceinline__ float load(const void* p, DType t, int64_t i) {
  if (t == DType::bf16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// Writes v to element i of a buffer of type `t`, rounding once (to nearest even) for bf16.
__device__ __forceinline__ void store(void* p, DType t, int64_t i, float v) {
  if (t == DType::bf16) {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// Copies element i of src (type ts) to element j of dst (type td): exact when types match.
__device__ __forceinline__ void copy(void* dst, DType td, int64_t j, const void* src, DType ts, int64_t i) {
  store(dst, td, j, load(src, ts, i));
}

// 8 bf16 values (one 16-byte word) <-> f32: unpack8 widens exactly, pack8 rounds each to nearest
// even. load8 reads 8 consecutive elements at a 16-byte aligned address: one 16-byte load for
// bf16, two for f32.
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}
__device__ __forceinline__ uint4 pack8(const float* f) {
  uint4 u;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return u;
}
// The 16 bytes are copied out first: unpack8 on a reference into global memory reads it through
// 4-byte bfloat162 pointers, which compiled to four 4-byte loads, each widened as it arrived.
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float* f) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  unpack8(u, f);
}
__device__ __forceinline__ void load8(const float* p, float* f) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
  f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// The contract's SiLU: acc / (1 + expf(-acc)), correctly rounded division (no fast-math).
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

// The contract's SiLU, x / (1 + expf(-x)) with a correctly rounded division, split so that the hot
// loop has no branch: silu_fast computes the quotient with the division's own fast-path sequence
// (reciprocal, one Newton step, quotient, exact residual, one correction), which is the correctly
// rounded quotient wherever every intermediate is a finite normal number, i.e. for d = 1 + e in
// [1, 2^64] and 2^-60 <= |x| <= FLT_MAX; outside that range (d huge or inf, x tiny, zero, infinite
// or NaN) it raises `bad`, and
// the caller recomputes that batch with the plain division (dev::silu). Either way the bytes are
// dev::silu's (the conv arms' and swiglu's tests compare them on every output).
// (Through silu_batch: conv.fwd's register arms, gdn_prefill_fused and the 16-byte swiglu kernel.)
__device__ __forceinline__ float silu_fast(float x, bool& bad) {
  const float d = 1.0f + expf(-x);
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(d));
  r = __fmaf_rn(r, __fmaf_rn(-d, r, 1.0f), r);
  float q = __fmaf_rn(x, r, 0.0f);
  q = __fmaf_rn(r, __fmaf_rn(-d, q, x), q);
  const float ax = fabsf(x);
  bad |= !((d <= 0x1p64f) & (ax >= 0x1p-60f) & (ax <= 0x1.fffffep127f));  // bitwise: no branches
  return q;
}
// y = silu(x) over a batch of N: silu_fast for all, and the whole batch again with dev::silu where
// one of them was outside its exact range (rare). dev::silu's bytes either way.
template <int N>
__device__ __forceinline__ void silu_batch(const float (&x)[N], float (&y)[N]) {
  bool bad = false;
#pragma unroll
  for (int i = 0; i < N; ++i) y[i] = silu_fast(x[i], bad);
  if (bad) {
#pragma unroll
    for (int i = 0; i < N; ++i) y[i] = silu(x[i]);
  }
}

// The MLP activation of one element (swiglu.h): silu(g), rounded to bf16 when round_act (the
// model's bf16 intermediate), times u. The swiglu kernel and the skinny GEMM's SwiGLU epilogue
// both call it, so they give the same bytes.
// swiglu_of_silu: the same from a = silu(g) already computed (the swiglu kernel's dev::silu_fast).
__device__ __forceinline__ float swiglu_of_silu(float a, float u, bool round_act) {
  if (round_act) a = __bfloat162float(__float2bfloat16_rn(a));
  return a * u;
}
__device__ __forceinline__ float swiglu_value(float g, float u, bool round_act) {
  return swiglu_of_silu(silu(g), u, round_act);
}

// The gated RMSNorm (rmsnorm.h) of one row from its sum of squares `ss` over n elements: the
// inverse RMS, then one element's output. The norm kernels and the delta rule's fused norm call
// both, so they give the same bytes.
__device__ __forceinline__ float gated_norm_inv(float ss, int n, float eps) {
  return 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
}
__device__ __forceinline__ float gated_norm_value(float w, float x, float inv, float z) {
  return (w * (x * inv)) * silu(z);
}
// The sum of squares of a row that R consecutive lanes hold as 8 consecutive values each (R a
// power of two <= 32; every lane of the warp calls it): fmaf over the 8 values in index order from
// 0, then a butterfly over the R lanes. The order of gated_rmsnorm's 16-byte kernel, which the
// delta-rule prefill's fused norm shares (the same bytes).
template <int R>
__device__ __forceinline__ float row_sumsq8(const float* v) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) s = fmaf(v[i], v[i], s);
#pragma unroll
  for (int o = R / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  return s;
}

// Thread-block cluster barriers (sm_90), split so that work can go between arrive and wait:
// relaxed (no memory ordering: "every block has started"), release / acquire (this block's
// shared-memory writes are seen by the blocks that pass the wait).
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_release() {
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }

// softplus(x) = x > 20 ? x : log1pf(expf(x))
__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Lets `kernel` launch with `bytes` of dynamic shared memory: above the default 48 KB the opt-in
// attribute is set (not a stream operation: legal before a launch that is being captured).
template <typename Kernel>
cudaError_t allow_dynamic_smem(Kernel* kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
}

// The launchers of the sm_90a-only kernels (built for compute capability 9.0 alone): cudaSuccess
// on such a device; cudaErrorNoKernelImageForDevice, with `chk` holding the reason, on any other;
// the runtime's error when the device cannot be queried.
template <typename Check>
cudaError_t require_sm90a(Check& chk) {
  int dev = 0, major = 0, minor = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err == cudaSuccess) err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (err != cudaSuccess) return err;
  return chk.require(sm90a_device(major, minor),
                     "needs a device of compute capability 9.0 (the kernel is built for sm_90a)")
                 .ok()
             ? cudaSuccess
             : cudaErrorNoKernelImageForDevice;
}

}  // namespace sg::dev
