// attn_prep.cu: q/k zero-centred RMSNorm + partial RoPE, gate split, KV cache append (see
// attn_prep.h). One block per token row; one warp per head (norm), heads looped over warps. The
// cache dtype (bf16 or f32) only changes the stores (dev::store: one rounding for bf16, none for f32).
#include "kernels/attn_prep.h"
#include "kernels/device_util.cuh"

namespace sg {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// True when row t is live; then slot and pos are its cache coordinates.
__device__ __forceinline__ bool resolve_row(const AttnTokenMeta& m, int t, int max_context, int& slot, int& pos) {
  if (m.num_tokens && t >= *m.num_tokens) return false;
  const int s = m.token_seq[t];
  if (s < 0) return false;
  slot = m.slots[s];
  if (slot < 0) return false;
  pos = m.positions[t];
  return pos >= 0 && pos < max_context;
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Norm + rope of one head (D features at src[off..]) by one warp, into dst[doff..].
// xs: this warp's scratch of D floats; cs: cos[half] then sin[half].
__device__ void norm_rope_head(const AttnPrepParams& p, const void* src, int64_t off, const void* w, void* dst,
                               DType dst_dtype, int64_t doff, float* xs, const float* cs) {
  const int lane = threadIdx.x & 31;
  const int D = p.D;
  float ss = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float x = dev::load(src, p.in_dtype, off + d);
    xs[d] = x;
    ss = ss + x * x;
  }
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + p.eps);
  __syncwarp();
  for (int d = lane; d < D; d += 32) xs[d] = (xs[d] * inv) * (1.0f + dev::load(w, p.norm_dtype, d));
  __syncwarp();
  const int half = p.rotary_dim / 2;
  for (int d = lane; d < D; d += 32) {
    float y;
    if (d < half) {
      y = xs[d] * cs[d] - xs[d + half] * cs[half + d];
    } else if (d < p.rotary_dim) {
      const int i = d - half;
      y = xs[d] * cs[i] + xs[i] * cs[half + i];
    } else {
      y = xs[d];
    }
    dev::store(dst, dst_dtype, doff + d, y);
  }
  __syncwarp();  // xs is reused by the next head
}

__global__ void __launch_bounds__(kThreads) attn_prep_kernel(const AttnPrepParams p) {
  extern __shared__ float sm[];
  const int t = blockIdx.x;
  const int D = p.D;
  const int64_t qg_stride = p.qg_stride ? p.qg_stride : static_cast<int64_t>(p.Hq) * 2 * D;
  const int64_t k_stride = p.k_stride ? p.k_stride : static_cast<int64_t>(p.Hkv) * D;
  const int64_t v_stride = p.v_stride ? p.v_stride : static_cast<int64_t>(p.Hkv) * D;
  const int64_t qrow = static_cast<int64_t>(t) * p.Hq * D;
  int slot = -1, pos = 0;
  if (!resolve_row(p.meta, t, p.max_context, slot, pos)) {
    for (int i = threadIdx.x; i < p.Hq * D; i += kThreads) {
      dev::store(p.q, p.q_dtype, qrow + i, 0.0f);
      dev::store(p.gate, p.q_dtype, qrow + i, 0.0f);
    }
    return;
  }
  const int half = p.rotary_dim / 2;
  float* cs = sm;                       // [rotary]: cos[half], sin[half]
  float* scratch = sm + p.rotary_dim;   // [kWarps][D]
  const float base = static_cast<float>(p.rope_theta);
  for (int i = threadIdx.x; i < half; i += kThreads) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(p.rotary_dim);
    const float inv_freq = 1.0f / static_cast<float>(pow(static_cast<double>(base), static_cast<double>(e)));
    const float a = static_cast<float>(pos) * inv_freq;
    cs[i] = static_cast<float>(cos(static_cast<double>(a)));
    cs[half + i] = static_cast<float>(sin(static_cast<double>(a)));
  }
  // Gate and v: plain copies (one rounding when the dtypes differ).
  const int64_t crow = ((static_cast<int64_t>(slot) * p.max_context + pos) * p.Hkv) * D;
  for (int i = threadIdx.x; i < p.Hq * D; i += kThreads) {
    const int h = i / D, d = i % D;
    dev::copy(p.gate, p.q_dtype, qrow + i, p.qg, p.in_dtype, t * qg_stride + static_cast<int64_t>(h) * 2 * D + D + d);
  }
  for (int i = threadIdx.x; i < p.Hkv * D; i += kThreads) {
    dev::copy(p.v_cache, p.cache_dtype, crow + i, p.v, p.in_dtype, t * v_stride + i);
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5;
  float* xs = scratch + warp * D;
  for (int job = warp; job < p.Hq + p.Hkv; job += kWarps) {
    if (job < p.Hq) {
      norm_rope_head(p, p.qg, t * qg_stride + static_cast<int64_t>(job) * 2 * D, p.q_norm, p.q, p.q_dtype,
                     qrow + static_cast<int64_t>(job) * D, xs, cs);
    } else {
      const int g = job - p.Hq;
      norm_rope_head(p, p.k, t * k_stride + static_cast<int64_t>(g) * D, p.k_norm, p.k_cache, p.cache_dtype,
                     crow + static_cast<int64_t>(g) * D, xs, cs);
    }
  }
}

}  // namespace

cudaError_t attn_prep(const AttnPrepParams& p, cudaStream_t stream) {
  if (p.T < 0 || p.Hq <= 0 || p.Hkv <= 0 || p.D <= 0 || p.D > 1024 || p.rotary_dim < 0 || p.rotary_dim % 2 != 0 ||
      p.rotary_dim > p.D || p.max_context <= 0 || !(p.rope_theta > 0.0))
    return cudaErrorInvalidValue;
  const auto fp = [](DType t) { return t == DType::bf16 || t == DType::f32; };  // all dev::load/store know
  if (!fp(p.in_dtype) || !fp(p.norm_dtype) || !fp(p.q_dtype) || !fp(p.cache_dtype)) return cudaErrorInvalidValue;
  if (!p.qg || !p.k || !p.v || !p.q_norm || !p.k_norm || !p.q || !p.gate || !p.k_cache || !p.v_cache ||
      !p.meta.positions || !p.meta.token_seq || !p.meta.slots)
    return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(p.rotary_dim + kWarps * p.D) * sizeof(float);
  if (smem > 48 * 1024) return cudaErrorInvalidValue;
  attn_prep_kernel<<<p.T, kThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace sg
