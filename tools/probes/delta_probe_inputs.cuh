// delta_probe_inputs.cuh: the delta-rule probes' deterministic inputs (delta_prefill_probe.cu,
// delta_inverse_probe.cu), generated on the device so that the same seed and index give the same
// value in every probe: uniform values with optional spikes (g's fast decays), and rows of unit L2
// norm (q and k as postconv makes them). For the hand-built probes of tools/probes/ only.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/numeric.h"

namespace probe_inputs {

using sg::DType;

// Deterministic values: splitmix64 of (seed, index), its top 24 bits as a uniform in [lo, hi).
__device__ __forceinline__ float hash_uniform(uint64_t seed, uint64_t i, float lo, float hi) {
  uint64_t x = seed * 0xD1B54A32D192ED03ull + i + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return lo + (hi - lo) * (static_cast<float>(x >> 40) * 0x1p-24f);
}

__device__ __forceinline__ void put(void* out, DType t, int64_t i, float x) {
  if (t == DType::bf16) {
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(x);
  } else {
    static_cast<float*>(out)[i] = x;
  }
}

// n values uniform in [lo, hi); every `spike`-th (when > 0) is `spike_value` instead.
__global__ void fill_uniform(void* out, DType t, int64_t n, uint64_t seed, float lo, float hi, int spike,
                             float spike_value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    put(out, t, i, spike > 0 && i % spike == 0 ? spike_value : hash_uniform(seed, i, lo, hi));
  }
}

// rows x dim values uniform in [-1, 1), each row scaled to unit L2 norm (a warp a row; the sum of
// squares in double, in a fixed order).
__global__ void fill_unit_rows(void* out, DType t, int64_t rows, int dim, uint64_t seed) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t r = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; r < rows; r += warps) {
    double n2 = 0.0;
    for (int i = lane; i < dim; i += 32) {
      const double x = hash_uniform(seed, r * dim + i, -1.0f, 1.0f);
      n2 += x * x;
    }
    for (int d = 16; d > 0; d >>= 1) n2 += __shfl_xor_sync(0xffffffffu, n2, d);
    const float inv = static_cast<float>(1.0 / sqrt(n2 + 1e-12));
    for (int i = lane; i < dim; i += 32) put(out, t, r * dim + i, hash_uniform(seed, r * dim + i, -1.0f, 1.0f) * inv);
  }
}

}  // namespace probe_inputs
