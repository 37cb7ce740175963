// attn_prep.cu: q/k zero-centred RMSNorm + partial RoPE, gate split, KV cache append (see
// attn_prep.h), in two forms with the same bytes: per element (any dtype) and 16 bytes a lane
// (attn_prep_vec_kernel, the real models' bf16 case). One warp per head job (token, q head or k head), four warps a
// block, no block barrier: a q job also copies its head's gate half, a k job its v head. Before the dependency wait a
// warp reads its row's metadata and rotary-table row; after it, its head's features and norm weight (D <= 256: into
// registers, before the copy's stores), then the copy, whose 16-byte form (where dtypes and alignment allow) issues
// each lane's loads before its stores. The cache dtype (bf16 or f32) only changes the stores (dev::store: one rounding
// for bf16, none for f32).
#include <algorithm>

#include "kernels/attn_prep.h"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

constexpr int kWarps = 4;   // warps a block, one head job each
constexpr int kRegPer = 8;  // features per lane held in registers: D <= 256 (the real models)

// True when row t (< T: every per-token array has its entry) is live; then slot and pos are its
// cache coordinates. The row's own entries are read together, then the sequence's slot: two
// memory round trips, not four one after another.
__device__ __forceinline__ bool resolve_row(const AttnTokenMeta& m, int t, int max_context, int& slot, int& pos) {
  const int n = m.num_tokens ? *m.num_tokens : INT32_MAX;
  const int s = m.token_seq[t];
  pos = m.positions[t];
  if (t >= n || s < 0) return false;
  slot = m.slots[s];
  return slot >= 0 && pos >= 0 && pos < max_context;
}

// cos and sin of rotary angle i (< rotary_dim / 2) at position pos (see attn_prep.h): the one
// definition of the rotary table, in the kernel and in rope_table_fill.
__device__ __forceinline__ void rope_cos_sin(int pos, int i, int rotary_dim, double theta, float& c, float& s) {
  const float e = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
  const float inv_freq =
      1.0f / static_cast<float>(pow(static_cast<double>(static_cast<float>(theta)), static_cast<double>(e)));
  const float a = static_cast<float>(pos) * inv_freq;
  c = static_cast<float>(cos(static_cast<double>(a)));
  s = static_cast<float>(sin(static_cast<double>(a)));
}

__global__ void rope_table_kernel(float* table, int max_context, int rotary_dim, double theta) {
  pdl_start();  // kernels/launch.cuh
  const int half = rotary_dim / 2;
  const int64_t n = static_cast<int64_t>(max_context) * half;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int pos = static_cast<int>(k / half), i = static_cast<int>(k % half);
    float* row = table + static_cast<int64_t>(pos) * rotary_dim;
    rope_cos_sin(pos, i, rotary_dim, theta, row[i], row[half + i]);
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One head job's inputs: the features d = lane + 32 i of x and of the norm weight, loaded before
// anything is stored (a load after a store to a possibly aliasing pointer cannot move ahead of it,
// which would cost one memory round trip per feature), for D <= 32 * kRegPer.
struct HeadIn {
  float x[kRegPer], w[kRegPer];
};

__device__ __forceinline__ void load_head(const AttnPrepParams& p, const void* src, int64_t off, const void* w,
                                          HeadIn& in) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < kRegPer; ++i) {
    const int d = lane + 32 * i;
    in.x[i] = d < p.D ? dev::load(src, p.in_dtype, off + d) : 0.0f;
    in.w[i] = d < p.D ? dev::load(w, p.norm_dtype, d) : 0.0f;
  }
}

// Rope of the normed head in xs (D floats) into dst[doff..]; cs: cos[half] then sin[half].
__device__ __forceinline__ void rope_store(const AttnPrepParams& p, const float* xs, void* dst, DType dst_dtype,
                                           int64_t doff, const float* cs) {
  const int lane = threadIdx.x & 31;
  const int half = p.rotary_dim / 2;
  for (int d = lane; d < p.D; d += 32) {
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
}

// Norm + rope of one head by one warp. The sum of squares runs over d = lane, lane + 32, ... in
// that order (ss + x * x, two roundings), then the warp tree: the same arithmetic for the register
// path (`reg`: the features already in `in`, D <= 256) and the loop (larger D). xs: this warp's scratch of D floats.
__device__ __forceinline__ void norm_rope_head(const AttnPrepParams& p, const void* src, int64_t off, const void* w,
                                               void* dst, DType dst_dtype, int64_t doff, float* xs, const float* cs,
                                               bool reg, const HeadIn& in) {
  const int lane = threadIdx.x & 31;
  const int D = p.D;
  float ss = 0.0f;
  if (reg) {
#pragma unroll
    for (int i = 0; i < kRegPer; ++i)
      if (lane + 32 * i < D) ss = ss + in.x[i] * in.x[i];
  } else {
    for (int d = lane; d < D; d += 32) {
      const float x = dev::load(src, p.in_dtype, off + d);
      xs[d] = x;
      ss = ss + x * x;
    }
  }
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + p.eps);
  __syncwarp();
  if (reg) {
#pragma unroll
    for (int i = 0; i < kRegPer; ++i) {
      const int d = lane + 32 * i;
      if (d < D) xs[d] = (in.x[i] * inv) * (1.0f + in.w[i]);
    }
  } else {
    for (int d = lane; d < D; d += 32) xs[d] = (xs[d] * inv) * (1.0f + dev::load(w, p.norm_dtype, d));
  }
  __syncwarp();
  rope_store(p, xs, dst, dst_dtype, doff, cs);
  __syncwarp();  // xs is reused by the next head
}

// Copies n elements src[soff + i] -> dst[doff + i] by one warp: 16 bytes at a time when both are
// bf16 and 16-byte aligned (n, soff and doff multiples of 8), every lane's loads before its stores.
__device__ __forceinline__ void warp_copy(void* dst, DType td, int64_t doff, const void* src, DType ts, int64_t soff,
                                          int n, bool vec) {
  const int lane = threadIdx.x & 31;
  if (vec) {
    const uint4* s4 = static_cast<const uint4*>(src) + soff / 8;
    uint4* d4 = static_cast<uint4*>(dst) + doff / 8;
    const int n8 = n / 8;
    for (int i = lane; i < n8; i += 64) {
      const int j = i + 32;
      const uint4 a = s4[i];
      const uint4 b = j < n8 ? s4[j] : uint4{};
      d4[i] = a;
      if (j < n8) d4[j] = b;
    }
    return;
  }
  for (int i = lane; i < n; i += 32) dev::copy(dst, td, doff + i, src, ts, soff + i);
}

// One warp per head job (token t, job j): j < Hq is q head j (norm + rope into q, its gate half
// copied into gate), else k head j - Hq (norm + rope into the k cache, its v head copied into the
// v cache). Jobs are independent: no block barrier, and the jobs of a token run on as many warps
// (a block per token with a warp per job held one token an SM at a time, its metadata, load,
// reduction and store round trips one after another). Before the dependency wait a warp reads its
// row's metadata and rotary-table row (written before the step's first kernel; launch.cuh says why
// that is safe), or computes the row without a table; after it, its head's features and norm
// weight (the register path, D <= 256) before the copy. Shared memory per warp: cs [rotary] (cos
// then sin), xs [D].
__global__ void __launch_bounds__(kWarps * 32) attn_prep_kernel(const AttnPrepParams p, bool vec_gate, bool vec_v) {
  extern __shared__ float sm[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int D = p.D, jobs = p.Hq + p.Hkv;
  const int64_t wj = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int t = static_cast<int>(wj / jobs), job = static_cast<int>(wj % jobs);
  if (t >= p.T) {  // the last block's spare warps (the block's other warps wait)
    pdl_start();
    return;
  }
  float* cs = sm + warp * (p.rotary_dim + D);  // [rotary]: cos[half], sin[half]
  float* xs = cs + p.rotary_dim;               // [D]
  const int64_t qg_stride = p.qg_stride ? p.qg_stride : static_cast<int64_t>(p.Hq) * 2 * D;
  const int64_t k_stride = p.k_stride ? p.k_stride : static_cast<int64_t>(p.Hkv) * D;
  const int64_t v_stride = p.v_stride ? p.v_stride : static_cast<int64_t>(p.Hkv) * D;
  const int64_t qrow = static_cast<int64_t>(t) * p.Hq * D;
  int slot = -1, pos = 0;
  const bool live = resolve_row(p.meta, t, p.max_context, slot, pos);
  if (live && p.rope_table) {
    for (int i = lane; i < p.rotary_dim; i += 32) cs[i] = p.rope_table[static_cast<int64_t>(pos) * p.rotary_dim + i];
  } else if (live) {  // computed here, before the head's loads hold their registers
    const int half = p.rotary_dim / 2;
    for (int i = lane; i < half; i += 32) rope_cos_sin(pos, i, p.rotary_dim, p.rope_theta, cs[i], cs[half + i]);
  }
  pdl_start();  // kernels/launch.cuh
  if (!live) {
    if (job < p.Hq) {
      for (int d = lane; d < D; d += 32) {
        dev::store(p.q, p.q_dtype, qrow + static_cast<int64_t>(job) * D + d, 0.0f);
        dev::store(p.gate, p.q_dtype, qrow + static_cast<int64_t>(job) * D + d, 0.0f);
      }
    }
    return;
  }
  const bool is_q = job < p.Hq;
  const int h = is_q ? job : job - p.Hq;
  const void* src = is_q ? p.qg : p.k;
  const void* w = is_q ? p.q_norm : p.k_norm;
  const int64_t off =
      is_q ? t * qg_stride + static_cast<int64_t>(h) * 2 * D : t * k_stride + static_cast<int64_t>(h) * D;
  const bool reg = D <= 32 * kRegPer;
  HeadIn in;
  if (reg) load_head(p, src, off, w, in);
  // Gate (q jobs) and v (k jobs): plain copies (one rounding when the dtypes differ).
  const int64_t crow = ((static_cast<int64_t>(slot) * p.max_context + pos) * p.Hkv + h) * D;
  if (is_q) {
    warp_copy(p.gate, p.q_dtype, qrow + static_cast<int64_t>(h) * D, p.qg, p.in_dtype, off + D, D, vec_gate);
  } else {
    warp_copy(p.v_cache, p.cache_dtype, crow, p.v, p.in_dtype, t * v_stride + static_cast<int64_t>(h) * D, D, vec_v);
  }
  __syncwarp();
  if (is_q) {
    norm_rope_head(p, src, off, w, p.q, p.q_dtype, qrow + static_cast<int64_t>(h) * D, xs, cs, reg, in);
  } else {
    norm_rope_head(p, src, off, w, p.k_cache, p.cache_dtype, crow, xs, cs, reg, in);
  }
}

// The 16-byte form of attn_prep_kernel for the real models' case (bf16 in, q, gate and cache; a
// rotary table; D <= 256 and D % 8 == 0; rotary_dim % 16 == 0; 16-byte aligned rows): lane L < D / 8
// moves features 8L .. 8L + 7 with one load and one store, where the per-element kernel issues
// eight 2-byte ones and a dtype switch each (968 instructions a head job measured, 20% of the
// bandwidth floor). The same bytes: the features go through the warp's shared row xs, so the sum
// of squares runs over d = lane, lane + 32, ... in that order and then the same warp tree; the
// norm and rotation are the same per-element expressions (W: the norm weight's dtype).
template <typename W>
__global__ void __launch_bounds__(kWarps * 32) attn_prep_vec_kernel(const AttnPrepParams p) {
  extern __shared__ float sm[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int D = p.D, jobs = p.Hq + p.Hkv, half = p.rotary_dim / 2;
  const int64_t wj = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int t = static_cast<int>(wj / jobs), job = static_cast<int>(wj % jobs);
  if (t >= p.T) {
    pdl_start();
    return;
  }
  float* cs = sm + warp * (p.rotary_dim + D);  // [rotary]: cos[half], sin[half]
  float* xs = cs + p.rotary_dim;               // [D]
  const bool is_q = job < p.Hq, lv = 8 * lane < D;
  const int h = is_q ? job : job - p.Hq, d0 = 8 * lane;
  int slot = -1, pos = 0;
  const bool live = resolve_row(p.meta, t, p.max_context, slot, pos);
  float w[8] = {};  // norm weight of features d0 .. d0 + 7: no step writes it
  if (live && lv) dev::load8(static_cast<const W*>(is_q ? p.q_norm : p.k_norm) + d0, w);
  if (live && 4 * lane < p.rotary_dim) {
    const float4 c =
        *reinterpret_cast<const float4*>(p.rope_table + static_cast<int64_t>(pos) * p.rotary_dim + 4 * lane);
    *reinterpret_cast<float4*>(cs + 4 * lane) = c;
  }
  pdl_start();  // kernels/launch.cuh
  using bf = __nv_bfloat16;
  const int64_t qg_stride = p.qg_stride ? p.qg_stride : static_cast<int64_t>(p.Hq) * 2 * D;
  const int64_t k_stride = p.k_stride ? p.k_stride : static_cast<int64_t>(p.Hkv) * D;
  const int64_t v_stride = p.v_stride ? p.v_stride : static_cast<int64_t>(p.Hkv) * D;
  const int64_t qoff = (static_cast<int64_t>(t) * p.Hq + h) * D + d0;  // q and gate
  if (!live) {
    if (is_q && lv) {
      *reinterpret_cast<uint4*>(static_cast<bf*>(p.q) + qoff) = uint4{};
      *reinterpret_cast<uint4*>(static_cast<bf*>(p.gate) + qoff) = uint4{};
    }
    return;
  }
  const int64_t off =
      is_q ? t * qg_stride + static_cast<int64_t>(h) * 2 * D : t * k_stride + static_cast<int64_t>(h) * D;
  const int64_t crow = ((static_cast<int64_t>(slot) * p.max_context + pos) * p.Hkv + h) * D + d0;
  // This lane's features and its piece of the copy (gate for q jobs, v for k jobs): loads first.
  uint4 xu{}, cu{};
  if (lv) {
    xu = *reinterpret_cast<const uint4*>(static_cast<const bf*>(is_q ? p.qg : p.k) + off + d0);
    cu = *reinterpret_cast<const uint4*>(is_q ? static_cast<const bf*>(p.qg) + off + D + d0
                                              : static_cast<const bf*>(p.v) + t * v_stride +
                                                    static_cast<int64_t>(h) * D + d0);
    *reinterpret_cast<uint4*>(is_q ? static_cast<bf*>(p.gate) + qoff : static_cast<bf*>(p.v_cache) + crow) = cu;
  }
  float x[8];
  dev::unpack8(xu, x);
  if (lv) {
    *reinterpret_cast<float4*>(xs + d0) = make_float4(x[0], x[1], x[2], x[3]);
    *reinterpret_cast<float4*>(xs + d0 + 4) = make_float4(x[4], x[5], x[6], x[7]);
  }
  __syncwarp();
  float ss = 0.0f;  // as norm_rope_head: d = lane + 32 i in order, then the warp tree
#pragma unroll
  for (int i = 0; i < kRegPer; ++i) {
    const int d = lane + 32 * i;
    if (d < D) ss = ss + xs[d] * xs[d];
  }
  ss = warp_sum(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(D) + p.eps);
  __syncwarp();  // every lane has read xs
  float y[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) y[j] = (x[j] * inv) * (1.0f + w[j]);
  if (lv) {
    *reinterpret_cast<float4*>(xs + d0) = make_float4(y[0], y[1], y[2], y[3]);
    *reinterpret_cast<float4*>(xs + d0 + 4) = make_float4(y[4], y[5], y[6], y[7]);
  }
  __syncwarp();
  if (!lv) return;
  if (d0 < half) {  // rotary_dim % 16 == 0: the 8 features lie in one part of the rotation
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = xs[d0 + j] * cs[d0 + j] - xs[d0 + j + half] * cs[half + d0 + j];
  } else if (d0 < p.rotary_dim) {
    const int i = d0 - half;
#pragma unroll
    for (int j = 0; j < 8; ++j) y[j] = xs[d0 + j] * cs[i + j] + xs[i + j] * cs[half + i + j];
  }
  *reinterpret_cast<uint4*>(is_q ? static_cast<bf*>(p.q) + qoff : static_cast<bf*>(p.k_cache) + crow) = dev::pack8(y);
}

}  // namespace

cudaError_t rope_table_fill(float* table, int max_context, int rotary_dim, double theta, cudaStream_t stream) {
  LaunchCheck c("rope_table_fill");
  c.not_null(table, "table").in_range(max_context, 1, INT32_MAX, "max_context");
  c.in_range(rotary_dim, 0, INT32_MAX, "rotary_dim").require(rotary_dim % 2 == 0, "rotary_dim must be even");
  if (!c.ok()) return cudaErrorInvalidValue;
  const int64_t n = static_cast<int64_t>(max_context) * (rotary_dim / 2);
  if (n == 0) return cudaSuccess;
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
  launch_kernel(rope_table_kernel, blocks, 256, 0, stream, table, max_context, rotary_dim, theta);
  return cudaGetLastError();
}

cudaError_t attn_prep(const AttnPrepParams& p, cudaStream_t stream) {
  LaunchCheck c("attn_prep");
  c.in_range(p.T, 0, INT32_MAX, "T").in_range(p.Hq, 1, INT32_MAX, "Hq").in_range(p.Hkv, 1, INT32_MAX, "Hkv");
  c.in_range(p.D, 1, 1024, "D").in_range(p.rotary_dim, 0, p.D, "rotary_dim");
  c.require(p.rotary_dim % 2 == 0, "rotary_dim must be even").in_range(p.max_context, 1, INT32_MAX, "max_context");
  c.require(p.rope_theta > 0.0, "rope_theta must be > 0");
  const auto fp = [](DType t) { return t == DType::bf16 || t == DType::f32; };  // all dev::load/store know
  c.require(fp(p.in_dtype) && fp(p.norm_dtype) && fp(p.q_dtype) && fp(p.cache_dtype),
            "in_dtype, norm_dtype, q_dtype and cache_dtype must be bf16 or f32");
  c.not_null(p.qg, "qg").not_null(p.k, "k").not_null(p.v, "v").not_null(p.q_norm, "q_norm");
  c.not_null(p.k_norm, "k_norm").not_null(p.q, "q").not_null(p.gate, "gate").not_null(p.k_cache, "k_cache");
  c.not_null(p.v_cache, "v_cache").not_null(p.meta.positions, "meta.positions");
  c.not_null(p.meta.token_seq, "meta.token_seq").not_null(p.meta.slots, "meta.slots");
  if (!c.ok()) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(kWarps) * (p.rotary_dim + p.D) * sizeof(float);
  c.require(static_cast<int64_t>(p.Hq) + p.Hkv <= INT32_MAX, "Hq + Hkv head jobs a token exceed an int");
  if (!c.ok()) return cudaErrorInvalidValue;
  const int64_t blocks = (static_cast<int64_t>(p.T) * (p.Hq + p.Hkv) + kWarps - 1) / kWarps;
  c.require(blocks <= INT32_MAX, "T x (Hq + Hkv) head jobs exceed the grid");
  if (!c.ok()) return cudaErrorInvalidValue;
  // 16-byte copies: bf16 in and out, D a multiple of 8, aligned bases and row strides.
  const int64_t qg_stride = p.qg_stride ? p.qg_stride : static_cast<int64_t>(p.Hq) * 2 * p.D;
  const int64_t v_stride = p.v_stride ? p.v_stride : static_cast<int64_t>(p.Hkv) * p.D;
  const bool bf = p.in_dtype == DType::bf16;
  const bool vec_gate = bf && p.q_dtype == DType::bf16 && p.D % 8 == 0 && qg_stride % 8 == 0 && dev::aligned16(p.qg) &&
                        dev::aligned16(p.gate);
  const bool vec_v = bf && p.cache_dtype == DType::bf16 && p.D % 8 == 0 && v_stride % 8 == 0 && dev::aligned16(p.v) &&
                     dev::aligned16(p.v_cache);
  const int64_t k_stride = p.k_stride ? p.k_stride : static_cast<int64_t>(p.Hkv) * p.D;
  const bool vec_all = vec_gate && vec_v && p.q_dtype == DType::bf16 && k_stride % 8 == 0 && dev::aligned16(p.k) &&
                       dev::aligned16(p.q) && dev::aligned16(p.k_cache) && p.D <= 32 * kRegPer &&
                       p.rotary_dim % 16 == 0 && p.rope_table && dev::aligned16(p.rope_table) &&
                       dev::aligned16(p.q_norm) && dev::aligned16(p.k_norm);
  if (vec_all && p.norm_dtype == DType::f32) {
    launch_kernel(attn_prep_vec_kernel<float>, static_cast<unsigned>(blocks), kWarps * 32, smem, stream, p);
  } else if (vec_all && p.norm_dtype == DType::bf16) {
    launch_kernel(attn_prep_vec_kernel<__nv_bfloat16>, static_cast<unsigned>(blocks), kWarps * 32, smem, stream, p);
  } else {
    launch_kernel(attn_prep_kernel, static_cast<unsigned>(blocks), kWarps * 32, smem, stream, p, vec_gate, vec_v);
  }
  return cudaGetLastError();
}

}  // namespace sg
