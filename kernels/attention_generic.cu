// attention_generic.cu: the generic attention kernel for head sizes without a tuned kernel (any D
// in 1..kAttentionMaxD other than 32, 64, 128, 256; see attention.h). Correct and simple, not
// tuned: one block per (row, q head, split), each warp streams every 4th key of the block's context
// range, the 32 lanes split the D features (lane l holds d = l + 32 f), the dot product is an
// explicit fmaf chain per lane then an xor tree over the warp (every lane ends with the same bits,
// IEEE addition being commutative), so the online softmax (m, l) is warp-uniform; the warps are
// merged through shared memory with the usual rescaling. Scalar cache loads (any D, any row
// alignment). Decode with splits > 1 writes the split's (o, m, l) to the workspace in the tuned
// kernel's layout and the tuned merge kernel finishes (attention.cu); prefill is one split over
// every token row. Grid (T, Hq, splits), from the shapes only; no allocation (graph-safe).
#include <cuda_bf16.h>

#include "kernels/attention.h"
#include "kernels/attention_internal.cuh"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"

namespace sg::attn_detail {
namespace {

constexpr int kGenThreads = 128;
constexpr int kGenWarps = kGenThreads / 32;
constexpr int kGenMaxF = kAttentionMaxD / 32;  // features per lane at D = 256

__device__ __forceinline__ float cache_f32(const __nv_bfloat16* c, int64_t i) { return __bfloat162float(c[i]); }
__device__ __forceinline__ float cache_f32(const float* c, int64_t i) { return c[i]; }

template <typename Tc>
__global__ void __launch_bounds__(kGenThreads) attn_generic_kernel(const AttentionParams p, float scale) {
  pdl_start();                                     // kernels/launch.cuh
  __shared__ float so[kGenWarps][kAttentionMaxD];  // per warp: o over D
  __shared__ float smx[kGenWarps], sl[kGenWarps];  // per warp: running max, sum
  const int b = blockIdx.x, h = blockIdx.y, z = blockIdx.z;
  const int splits = gridDim.z;
  const int D = p.D;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t orow = (static_cast<int64_t>(b) * p.Hq + h) * D;  // row (b, h) of q, gate, out [T, Hq, D]
  int slot = -1, pos = 0;
  if (!resolve_row(p.meta, b, p.max_context, slot, pos)) {
    attn_detail::zero_padding_row(p, b, h, D, splits);
    return;
  }
  const int g = h / (p.Hq / p.Hkv);
  int k0 = 0, k1 = 0;
  attn_detail::split_range(pos, splits, z, k0, k1);

  float qr[kGenMaxF], o[kGenMaxF];
#pragma unroll
  for (int f = 0; f < kGenMaxF; ++f) {
    const int d = lane + 32 * f;
    qr[f] = d < D ? dev::load(p.q, p.q_dtype, orow + d) : 0.0f;
    o[f] = 0.0f;
  }
  float m = kNegInf, l = 0.0f;
  const Tc* kc = static_cast<const Tc*>(p.k_cache);  // [num_slots, max_context, Hkv, D]
  const Tc* vc = static_cast<const Tc*>(p.v_cache);  // [num_slots, max_context, Hkv, D]
  const int64_t base = (static_cast<int64_t>(slot) * p.max_context * p.Hkv + g) * D;  // (slot, 0, g, 0)
  const int64_t pos_stride = static_cast<int64_t>(p.Hkv) * D;
  for (int j = k0 + warp; j < k1; j += kGenWarps) {  // warp-uniform
    const int64_t r = base + j * pos_stride;
    float dot = 0.0f;
#pragma unroll
    for (int f = 0; f < kGenMaxF; ++f) {
      const int d = lane + 32 * f;
      if (d < D) dot = fmaf(qr[f], cache_f32(kc, r + d), dot);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float s = dot * scale;
    if (s > m) {
      const float corr = expf(m - s);  // 0 when m was -inf
      l *= corr;
#pragma unroll
      for (int f = 0; f < kGenMaxF; ++f) o[f] *= corr;
      m = s;
    }
    const float pr = expf(s - m);
    l += pr;
#pragma unroll
    for (int f = 0; f < kGenMaxF; ++f) {
      const int d = lane + 32 * f;
      if (d < D) o[f] = fmaf(pr, cache_f32(vc, r + d), o[f]);
    }
  }
#pragma unroll
  for (int f = 0; f < kGenMaxF; ++f) {
    const int d = lane + 32 * f;
    if (d < D) so[warp][d] = o[f];
  }
  if (lane == 0) {
    smx[warp] = m;
    sl[warp] = l;
  }
  __syncthreads();
  float mx = kNegInf;
  for (int w = 0; w < kGenWarps; ++w) mx = fmaxf(mx, smx[w]);
  for (int d = threadIdx.x; d < D; d += kGenThreads) {
    float lsum = 0.0f, osum = 0.0f;
    if (mx != kNegInf) {  // else no key in this split (splits > 1 only): (0, -inf, 0)
      for (int w = 0; w < kGenWarps; ++w) {
        const float c = expf(smx[w] - mx);  // 0 for a warp that saw no key
        lsum = fmaf(sl[w], c, lsum);
        osum = fmaf(so[w][d], c, osum);
      }
    }
    attn_detail::store_head_feature(p, b, h, d, splits, z, osum, mx, lsum);
  }
}

template <typename Tc>
void launch(const AttentionParams& p, int splits, cudaStream_t stream) {
  const dim3 grid(p.T, p.Hq, splits);
  launch_kernel(attn_generic_kernel<Tc>, grid, kGenThreads, 0, stream, p, attention_scale(p.D));
}

void launch_any_cache(const AttentionParams& p, int splits, cudaStream_t stream) {
  if (p.cache_dtype == DType::f32) {
    launch<float>(p, splits, stream);
  } else {
    launch<__nv_bfloat16>(p, splits, stream);
  }
}

}  // namespace

void launch_generic_decode(const AttentionParams& p, cudaStream_t stream) {
  launch_any_cache(p, p.splits, stream);
  if (p.splits > 1) launch_decode_merge(p, stream);
}

void launch_generic_prefill(const AttentionParams& p, cudaStream_t stream) { launch_any_cache(p, 1, stream); }

}  // namespace sg::attn_detail
