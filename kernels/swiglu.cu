// swiglu.cu: act = round_act(silu(gate)) * up over a fused [T, 2I] gate|up buffer.
#include "kernels/device_util.cuh"
#include "kernels/fast_div.h"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/swiglu.h"

namespace sg {
namespace {

constexpr int kBlock = 256;
constexpr int kPerThread = 4;
constexpr int kChunk = kBlock * kPerThread;  // elements of one token per block
// Steps of at least this many 8-output groups take 4 groups a thread (the 4B prefill of 32 x 1024
// tokens: 37.7 M); smaller ones one.
constexpr int64_t kWideGroups = int64_t{1} << 18;

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

// bf16 in and out, I % 8 == 0, 16-byte aligned rows: the [T, I] output as T * I / 8 groups of 8
// adjacent outputs, whose gate and up values are 16 contiguous bytes each (halves: at i and I + i;
// groups of 8: one 32-byte run); thread x of block b takes groups (b U + k) 256 + x, k < U, and
// issues all its loads before its first store (U = 4 on large steps: fewer, longer-lived blocks
// with more bytes in flight each; U = 1 on small ones, which need every SM). A group's token and
// column come from by_row (fast_div.h: a multiply and a shift) where the groups number below 2^31,
// else from a 64-bit division; SiLU is dev::silu_batch over a group's 8 gates (silu_fast, or dev::silu
// for a group where it is not exact): dev::silu's bytes either way, as the element kernel's, since the
// bf16 rounding and the product with up follow as dev::swiglu_value has them.
template <int U>
__global__ void __launch_bounds__(kBlock) swiglu_vec8_kernel(const SwigluParams p, int64_t stride, FastDiv by_row) {
  pdl_start();  // kernels/launch.cuh
  const int per_row = p.I / 8;
  const int64_t groups = static_cast<int64_t>(p.T) * per_row;
  const int64_t g0 = static_cast<int64_t>(blockIdx.x) * (kBlock * U) + threadIdx.x;
  const int live = p.live_rows ? *p.live_rows : p.T;
  const auto* gu = static_cast<const __nv_bfloat16*>(p.gu);
  uint4 ga[U], ua[U];
  bool on[U];
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t g = g0 + static_cast<int64_t>(k) * kBlock;
    int64_t t;
    int i;
    if (groups <= 0x7fffffffll) {  // by_row's range (a 64-bit division is a long instruction sequence)
      const uint32_t g32 = static_cast<uint32_t>(g), q = by_row.div(g32);
      t = q;
      i = static_cast<int>(by_row.mod(g32, q)) * 8;
    } else {
      t = g / per_row;
      i = static_cast<int>(g % per_row) * 8;
    }
    on[k] = g < groups && t < live;
    if (on[k]) {
      const int64_t row = t * stride;
      const int64_t gi = p.interleave ? (i >> 3) * 16 : i, ui = p.interleave ? gi + 8 : p.I + i;
      ga[k] = *reinterpret_cast<const uint4*>(gu + row + gi);
      ua[k] = *reinterpret_cast<const uint4*>(gu + row + ui);
    }
  }
#pragma unroll
  for (int k = 0; k < U; ++k) {
    const int64_t g = g0 + static_cast<int64_t>(k) * kBlock;
    if (g >= groups) continue;
    float y[8] = {};
    if (on[k]) {
      float gv[8], uv[8], a[8];
      dev::unpack8(ga[k], gv);
      dev::unpack8(ua[k], uv);
      dev::silu_batch(gv, a);
#pragma unroll
      for (int e = 0; e < 8; ++e) y[e] = dev::swiglu_of_silu(a[e], uv[e], p.act_dtype == DType::bf16);
    }
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.y) + 8 * g) = dev::pack8(y);  // [T, I]: t I + i = 8 g
  }
}

bool float_type(DType t) { return t == DType::f32 || t == DType::bf16; }

// Elements between tokens in gu (gu_stride, 0 = 2I).
int64_t row_stride(const SwigluParams& p) { return p.gu_stride ? p.gu_stride : 2 * static_cast<int64_t>(p.I); }

}  // namespace

bool swiglu_vector_path(const SwigluParams& p) {
  return p.gu_dtype == DType::bf16 && p.y_dtype == DType::bf16 && p.I % 8 == 0 && row_stride(p) % 8 == 0 &&
         dev::aligned16(p.gu) && dev::aligned16(p.y);
}

cudaError_t swiglu(const SwigluParams& p, cudaStream_t stream) {
  LaunchCheck chk("swiglu");
  chk.not_null(p.gu, "gu").not_null(p.y, "y").in_range(p.T, 0, INT32_MAX, "T").in_range(p.I, 1, 1 << 30, "I");
  chk.require(float_type(p.gu_dtype) && float_type(p.y_dtype) && float_type(p.act_dtype),
              "gu_dtype, y_dtype and act_dtype must be bf16 or f32");
  chk.require(p.interleave == 0 || p.interleave == 8, "interleave must be 0 or 8");
  chk.require(p.interleave == 0 || p.I % 8 == 0, "interleave 8 needs I % 8 == 0");
  const int64_t stride = row_stride(p);
  chk.require(stride >= 2 * static_cast<int64_t>(p.I), "gu_stride must be >= 2 I");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  if (swiglu_vector_path(p)) {
    const int64_t groups = static_cast<int64_t>(p.T) * (p.I / 8);
    const bool wide = groups >= kWideGroups;
    const int64_t per_block = static_cast<int64_t>(kBlock) * (wide ? 4 : 1);
    const int64_t blocks = (groups + per_block - 1) / per_block;
    chk.require(blocks <= 0x7fffffff, "T x I / 8 groups exceed the grid");
    if (!chk.ok()) return cudaErrorInvalidValue;
    const FastDiv by_row(static_cast<uint32_t>(p.I / 8));
    launch_kernel(wide ? swiglu_vec8_kernel<4> : swiglu_vec8_kernel<1>, static_cast<unsigned>(blocks), kBlock, 0,
                  stream, p, stride, by_row);
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
