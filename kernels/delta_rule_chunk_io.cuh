// delta_rule_chunk_io.cuh: global-memory I/O of the chunked delta-rule prefill kernels
// (delta_rule_prefill_chunked.cu, delta_rule_prefill_mma.cu): f32 / bf16 elements in groups of
// 4 or 2, as aligned vector words where `vec` allows, else element by element (masked past `valid`);
// and a chunk's gates (G, its exponentials and beta), which both kernels read the same way.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/delta_rule_prefill.h"
#include "kernels/device_util.cuh"
#include "kernels/numeric.h"

namespace sg::chunk_io {

__device__ __forceinline__ float4 ld4(const float* s) { return *reinterpret_cast<const float4*>(s); }
__device__ __forceinline__ void st4(float* s, const float4& v) { *reinterpret_cast<float4*>(s) = v; }
__device__ __forceinline__ float2 ld2(const float* s) { return *reinterpret_cast<const float2*>(s); }

// Elements i..i+3 of a buffer of type t (f32 or bf16) as f32; elements u >= valid read as 0 (and
// are not read). vec: the 4 elements are one aligned 16-byte (f32) or 8-byte (bf16) word.
__device__ __forceinline__ float4 load4(const void* p, DType t, int64_t i, int valid, bool vec) {
  if (vec && valid >= 4) {
    if (t == DType::bf16) {
      const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(p) + i);
      return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                         __uint_as_float(u.y & 0xffff0000u));
    }
    return *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
  }
  return make_float4(valid > 0 ? dev::load(p, t, i) : 0.0f, valid > 1 ? dev::load(p, t, i + 1) : 0.0f,
                     valid > 2 ? dev::load(p, t, i + 2) : 0.0f, valid > 3 ? dev::load(p, t, i + 3) : 0.0f);
}

__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

// Stores the first `valid` (<= 4) of v to elements i.. of a buffer of type t, rounding once for bf16.
__device__ __forceinline__ void store4(void* p, DType t, int64_t i, const float4& v, int valid, bool vec) {
  if (vec && valid >= 4) {
    if (t == DType::bf16) {
      *reinterpret_cast<uint2*>(static_cast<uint16_t*>(p) + i) = make_uint2(bf16_pair(v.x, v.y), bf16_pair(v.z, v.w));
    } else {
      *reinterpret_cast<float4*>(static_cast<float*>(p) + i) = v;
    }
    return;
  }
  if (valid > 0) dev::store(p, t, i, v.x);
  if (valid > 1) dev::store(p, t, i + 1, v.y);
  if (valid > 2) dev::store(p, t, i + 2, v.z);
  if (valid > 3) dev::store(p, t, i + 3, v.w);
}

// Stores the first `valid` (<= 2) of (x, y) to elements i, i + 1 (i even when vec).
__device__ __forceinline__ void store2(void* p, DType t, int64_t i, float x, float y, int valid, bool vec) {
  if (vec && valid >= 2) {
    if (t == DType::bf16) {
      *reinterpret_cast<uint32_t*>(static_cast<uint16_t*>(p) + i) = bf16_pair(x, y);
    } else {
      *reinterpret_cast<float2*>(static_cast<float*>(p) + i) = make_float2(x, y);
    }
    return;
  }
  if (valid > 0) dev::store(p, t, i, x);
  if (valid > 1) dev::store(p, t, i + 1, y);
}

// The gates of the 64-token chunk at token c0 (L tokens, 1..64) of v-head hv, by one warp (lane
// l has tokens 2l, 2l+1): G_r = g_0 + ... + g_r by a shuffle scan in double (g = 0 and beta = 0 past
// L, so G_63 = G_last and padded rows contribute nothing), then G, exp(G_r), exp(G_last - G_r) and
// beta into shared memory ([64] each).
__device__ __forceinline__ void chunk_gates(const DeltaRulePrefillParams& p, int64_t c0, int L, int hv, int lane,
                                            double* Gs, float* Es, float* Ls, float* Bs) {
  const int Hv = p.Hv, r = 2 * lane;
  const int64_t gb = (c0 + r) * Hv + hv;  // [T, Hv]
  const float g0 = r < L ? p.g[gb] : 0.0f, g1 = r + 1 < L ? p.g[gb + Hv] : 0.0f;
  const float b0 = r < L ? p.beta[gb] : 0.0f, b1 = r + 1 < L ? p.beta[gb + Hv] : 0.0f;
  double incl = static_cast<double>(g0) + static_cast<double>(g1);
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += y;
  }
  double excl = __shfl_up_sync(0xffffffffu, incl, 1);
  if (lane == 0) excl = 0.0;
  const double last = __shfl_sync(0xffffffffu, incl, 31);
  const double G0 = excl + static_cast<double>(g0), G1 = G0 + static_cast<double>(g1);
  Gs[r] = G0;
  Gs[r + 1] = G1;
  Es[r] = expf(static_cast<float>(G0));
  Es[r + 1] = expf(static_cast<float>(G1));
  Ls[r] = expf(static_cast<float>(last - G0));
  Ls[r + 1] = expf(static_cast<float>(last - G1));
  Bs[r] = b0;
  Bs[r + 1] = b1;
}

}  // namespace sg::chunk_io
