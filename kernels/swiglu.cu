// swiglu.cu: act = round_act(silu(gate)) * up over a fused [T, 2I] gate|up buffer.
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
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
  const int64_t row = static_cast<int64_t>(t) * stride;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int i = c0 + k * kBlock + threadIdx.x;
    if (i >= p.I) break;
    float yv = 0.0f;
    if (live) {
      // Halves: gate i at i, up at I + i. Groups of 8: gate i at 16 (i / 8) + i % 8, up 8 after it.
      const int64_t gi = p.interleave ? (i >> 3) * 16 + (i & 7) : i, ui = p.interleave ? gi + 8 : p.I + i;
      const float g = dev::load(p.gu, p.gu_dtype, row + gi);
      const float u = dev::load(p.gu, p.gu_dtype, row + ui);
      yv = dev::swiglu_value(g, u, p.act_dtype == DType::bf16);
    }
    dev::store(p.y, p.y_dtype, o0 + i, yv);
  }
}

// bf16 in and out, I % 8 == 0, 16-byte aligned rows: a thread takes 8 adjacent outputs, whose gate
// and up values are 16 contiguous bytes each (halves: at i and I + i; groups of 8: one 32-byte run).
__global__ void __launch_bounds__(kBlock) swiglu_vec8_kernel(const SwigluParams p, int chunks, int64_t stride) {
  pdl_start();  // kernels/launch.cuh
  const int t = static_cast<int>(blockIdx.x / chunks);
  const int i = (static_cast<int>(blockIdx.x % chunks) * kBlock + static_cast<int>(threadIdx.x)) * 8;
  if (i >= p.I) return;
  const bool live = !p.live_rows || t < *p.live_rows;
  const int64_t row = static_cast<int64_t>(t) * stride;
  const int64_t gi = p.interleave ? (i >> 3) * 16 : i, ui = p.interleave ? gi + 8 : p.I + i;
  const auto* gu = static_cast<const __nv_bfloat16*>(p.gu);
  float y[8] = {};
  if (live) {
    const uint4 ga = *reinterpret_cast<const uint4*>(gu + row + gi);
    const uint4 ua = *reinterpret_cast<const uint4*>(gu + row + ui);
    float g[8], u[8];
    dev::unpack8(ga, g);
    dev::unpack8(ua, u);
#pragma unroll
    for (int k = 0; k < 8; ++k) y[k] = dev::swiglu_value(g[k], u[k], p.act_dtype == DType::bf16);
  }
  *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.y) + static_cast<int64_t>(t) * p.I + i) = dev::pack8(y);
}

bool float_type(DType t) { return t == DType::f32 || t == DType::bf16; }

}  // namespace

cudaError_t swiglu(const SwigluParams& p, cudaStream_t stream) {
  LaunchCheck chk("swiglu");
  chk.not_null(p.gu, "gu").not_null(p.y, "y").in_range(p.T, 0, INT32_MAX, "T").in_range(p.I, 1, INT32_MAX, "I");
  chk.require(float_type(p.gu_dtype) && float_type(p.y_dtype) && float_type(p.act_dtype),
              "gu_dtype, y_dtype and act_dtype must be bf16 or f32");
  chk.require(p.interleave == 0 || p.interleave == 8, "interleave must be 0 or 8");
  chk.require(p.interleave == 0 || p.I % 8 == 0, "interleave 8 needs I % 8 == 0");
  const int64_t stride = p.gu_stride ? p.gu_stride : 2 * static_cast<int64_t>(p.I);
  chk.require(stride >= 2 * static_cast<int64_t>(p.I), "gu_stride must be >= 2 I");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  if (p.gu_dtype == DType::bf16 && p.y_dtype == DType::bf16 && p.I % 8 == 0 && stride % 8 == 0 &&
      dev::aligned16(p.gu) && dev::aligned16(p.y)) {
    const int chunks = (p.I / 8 + kBlock - 1) / kBlock;
    const int64_t blocks = static_cast<int64_t>(p.T) * chunks;
    chk.require(blocks <= 0x7fffffff, "T x ceil(I / 2048) blocks exceed the grid");
    if (!chk.ok()) return cudaErrorInvalidValue;
    launch_kernel(swiglu_vec8_kernel, static_cast<unsigned>(blocks), kBlock, 0, stream, p, chunks, stride);
    return cudaGetLastError();
  }
  const int chunks = (p.I + kChunk - 1) / kChunk;
  const int64_t blocks = static_cast<int64_t>(p.T) * chunks;
  chk.require(blocks <= 0x7fffffff, "T x ceil(I / 1024) blocks exceed the grid");
  if (!chk.ok()) return cudaErrorInvalidValue;
  launch_kernel(swiglu_kernel, static_cast<unsigned>(blocks), kBlock, 0, stream, p, chunks, stride);
  return cudaGetLastError();
}

}  // namespace sg
