// swiglu.cu: act = round_act(silu(gate)) * up over a fused [T, 2I] gate|up buffer.
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/swiglu.h"

namespace sg {
namespace {

constexpr int kBlock = 256;
constexpr int kPerThread = 4;
constexpr int kChunk = kBlock * kPerThread;  // elements of one token per block

__global__ void __launch_bounds__(kBlock) swiglu_kernel(const SwigluParams p, int chunks, int64_t stride) {
  pdl_start();  // kernels/launch.cuh
  const int t = static_cast<int>(blockIdx.x / chunks);
  const int c0 = static_cast<int>(blockIdx.x % chunks) * kChunk;
  const int64_t o0 = static_cast<int64_t>(t) * p.I;
  const bool live = !p.live_rows || t < *p.live_rows;
  const int64_t g0 = static_cast<int64_t>(t) * stride, u0 = g0 + p.I;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = c0 + k * kBlock + threadIdx.x;
    if (i >= p.I) break;
    float yv = 0.0f;
    if (live) {
      const float g = dev::load(p.gu, p.gu_dtype, g0 + i);
      const float u = dev::load(p.gu, p.gu_dtype, u0 + i);
      float a = dev::silu(g);
      if (p.act_dtype == DType::bf16) a = __bfloat162float(__float2bfloat16_rn(a));
      yv = a * u;
    }
    dev::store(p.y, p.y_dtype, o0 + i, yv);
  }
}

bool float_type(DType t) { return t == DType::f32 || t == DType::bf16; }

}  // namespace

cudaError_t swiglu(const SwigluParams& p, cudaStream_t stream) {
  if (!p.gu || !p.y || p.T < 0 || p.I < 1) return cudaErrorInvalidValue;
  if (!float_type(p.gu_dtype) || !float_type(p.y_dtype) || !float_type(p.act_dtype)) return cudaErrorInvalidValue;
  const int64_t stride = p.gu_stride ? p.gu_stride : 2 * static_cast<int64_t>(p.I);
  if (stride < 2 * static_cast<int64_t>(p.I)) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  const int chunks = (p.I + kChunk - 1) / kChunk;
  const int64_t blocks = static_cast<int64_t>(p.T) * chunks;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  launch_kernel(swiglu_kernel, static_cast<unsigned>(blocks), kBlock, 0, stream, p, chunks, stride);
  return cudaGetLastError();
}

}  // namespace sg
