// fill.cu: counter-based uniform fill (splitmix64 of seed and index).
#include "kernels/device_util.cuh"
#include "kernels/fill.h"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

#include <algorithm>

namespace sg {
namespace {

__host__ __device__ inline float unit_at(uint64_t seed, int64_t i) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i) + 0x632BE59BD9B4E019ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // 24 random bits: exact in f32
}

__global__ void fill_uniform_kernel(void* p, DType t, int64_t n, uint64_t seed, float lo, float hi) {
  pdl_start();  // kernels/launch.cuh
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dev::store(p, t, i, fmaf(hi - lo, unit_at(seed, i), lo));
  }
}

}  // namespace

float uniform_at(uint64_t seed, int64_t i, float lo, float hi) {
  float v = std::fma(hi - lo, unit_at(seed, i), lo);
  return v;
}

cudaError_t fill_uniform(void* p, DType dtype, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  LaunchCheck chk("fill_uniform");
  chk.require(dtype == DType::f32 || dtype == DType::bf16, "dtype must be bf16 or f32");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (n <= 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((n + 255) / 256, 132 * 16);
  launch_kernel(fill_uniform_kernel, static_cast<unsigned>(blocks), 256, 0, stream, p, dtype, n, seed, lo, hi);
  return cudaGetLastError();
}

}  // namespace sg
