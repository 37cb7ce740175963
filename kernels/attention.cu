// attention.cu: decode (split-K capable) and varlen prefill attention over the slot-indexed
// bf16 KV cache (see attention.h). f32 math, explicit fmaf, online softmax.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/device_util.cuh"

namespace sg {
namespace {

constexpr float kNegInf = -INFINITY;

__device__ __forceinline__ bool resolve_row(const AttnTokenMeta& m, int t, int max_context, int& slot, int& pos) {
  if (m.num_tokens && t >= *m.num_tokens) return false;
  const int s = m.token_seq[t];
  if (s < 0) return false;
  slot = m.slots[s];
  if (slot < 0) return false;
  pos = m.positions[t];
  return pos >= 0 && pos < max_context;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// 8 bf16 (16 bytes) -> f32.
__device__ __forceinline__ void unpack8(const uint4& u, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

// ---------------------------------------------------------------------------------------------
// Decode. Block (kv head g x head chunk, row b, split z), 4 warps. A warp streams keys; its 32
// lanes form 32 / L sub-groups of L = D / 8 lanes, one key per sub-group per step, 8 features per
// lane. Every sub-group keeps an online softmax (m, l, o) per query head of the chunk; sub-groups,
// then warps, then splits are merged with the usual rescaling.
constexpr int kDecThreads = 128;
constexpr int kDecWarps = kDecThreads / 32;
constexpr int kMaxG = 8;  // query heads per block (a kv head's group is chunked by 8)

struct DecArgs {
  AttentionParams p;
  int group, hchunks;
  float scale;
};

template <int D>
__global__ void __launch_bounds__(kDecThreads) attn_decode_kernel(const DecArgs a) {
  constexpr int L = D / 8;
  constexpr int KP = 32 / L;
  const AttentionParams& p = a.p;
  extern __shared__ float sm[];
  const int g = blockIdx.x / a.hchunks;
  const int hc = blockIdx.x % a.hchunks;
  const int h0 = g * a.group + hc * kMaxG;
  const int G = min(kMaxG, a.group - hc * kMaxG);
  const int b = blockIdx.y;
  const int splits = gridDim.z;
  const int z = blockIdx.z;
  int slot = -1, pos = 0;
  const bool live = resolve_row(p.meta, b, p.max_context, slot, pos);
  if (!live) {
    if (splits == 1) {
      for (int i = threadIdx.x; i < G * D; i += kDecThreads)
        dev::store(p.out, p.out_dtype, (static_cast<int64_t>(b) * p.Hq + h0) * D + i, 0.0f);
    }
    return;  // with splits > 1 the merge kernel writes the zeros
  }
  const int ctx = pos + 1;
  const int chunk = (ctx + splits - 1) / splits;
  const int k0 = z * chunk;
  const int k1 = min(ctx, k0 + chunk);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane / L, part = lane % L, d0 = part * 8;

  float qr[kMaxG][8];
#pragma unroll
  for (int hh = 0; hh < kMaxG; ++hh) {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      qr[hh][e] = hh < G ? dev::load(p.q, p.q_dtype, (static_cast<int64_t>(b) * p.Hq + h0 + hh) * D + d0 + e) : 0.0f;
  }
  float m[kMaxG], l[kMaxG], o[kMaxG][8];
#pragma unroll
  for (int hh = 0; hh < kMaxG; ++hh) {
    m[hh] = kNegInf;
    l[hh] = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; ++e) o[hh][e] = 0.0f;
  }
  const __nv_bfloat16* kc = static_cast<const __nv_bfloat16*>(p.k_cache);
  const __nv_bfloat16* vc = static_cast<const __nv_bfloat16*>(p.v_cache);
  const int64_t base = (static_cast<int64_t>(slot) * p.max_context * p.Hkv + g) * D + d0;
  const int64_t pos_stride = static_cast<int64_t>(p.Hkv) * D;
  for (int jb = k0 + warp * KP; jb < k1; jb += kDecWarps * KP) {  // warp-uniform trip count
    const int j = jb + sub;
    const bool valid = j < k1;
    float kf[8], vf[8];
    if (valid) {
      unpack8(*reinterpret_cast<const uint4*>(kc + base + j * pos_stride), kf);
      unpack8(*reinterpret_cast<const uint4*>(vc + base + j * pos_stride), vf);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) kf[e] = vf[e] = 0.0f;
    }
#pragma unroll
    for (int hh = 0; hh < kMaxG; ++hh) {
      if (hh >= G) break;
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) dot = fmaf(qr[hh][e], kf[e], dot);
#pragma unroll
      for (int off = L / 2; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      if (valid) {
        const float s = dot * a.scale;
        if (s > m[hh]) {
          const float corr = expf(m[hh] - s);  // 0 when m was -inf
          l[hh] *= corr;
#pragma unroll
          for (int e = 0; e < 8; ++e) o[hh][e] *= corr;
          m[hh] = s;
        }
        const float pr = expf(s - m[hh]);
        l[hh] += pr;
#pragma unroll
        for (int e = 0; e < 8; ++e) o[hh][e] = fmaf(pr, vf[e], o[hh][e]);
      }
    }
  }
  // Merge the sub-groups of the warp (lanes part, part + L, ...).
#pragma unroll
  for (int off = L; off < 32; off <<= 1) {
#pragma unroll
    for (int hh = 0; hh < kMaxG; ++hh) {
      if (hh >= G) break;
      const float mo = __shfl_xor_sync(0xffffffffu, m[hh], off);
      const float lo = __shfl_xor_sync(0xffffffffu, l[hh], off);
      const float mx = fmaxf(m[hh], mo);
      const float ca = mx == kNegInf ? 0.0f : expf(m[hh] - mx);
      const float cb = mx == kNegInf ? 0.0f : expf(mo - mx);
      l[hh] = l[hh] * ca + lo * cb;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float oo = __shfl_xor_sync(0xffffffffu, o[hh][e], off);
        o[hh][e] = o[hh][e] * ca + oo * cb;
      }
      m[hh] = mx;
    }
  }
  // smem: [warps][G][D] o, then [warps][G] m, [warps][G] l.
  float* so = sm;
  float* smx = sm + kDecWarps * G * D;
  float* sl = smx + kDecWarps * G;
  if (sub == 0) {
#pragma unroll
    for (int hh = 0; hh < kMaxG; ++hh) {
      if (hh >= G) break;
#pragma unroll
      for (int e = 0; e < 8; ++e) so[(warp * G + hh) * D + d0 + e] = o[hh][e];
      if (part == 0) {
        smx[warp * G + hh] = m[hh];
        sl[warp * G + hh] = l[hh];
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < G * D; i += kDecThreads) {
    const int hh = i / D, d = i % D;
    float mx = kNegInf;
    for (int w = 0; w < kDecWarps; ++w) mx = fmaxf(mx, smx[w * G + hh]);
    float lsum = 0.0f, osum = 0.0f;
    if (mx != kNegInf) {
      for (int w = 0; w < kDecWarps; ++w) {
        const float c = expf(smx[w * G + hh] - mx);
        lsum = fmaf(sl[w * G + hh], c, lsum);
        osum = fmaf(so[(w * G + hh) * D + d], c, osum);
      }
    }
    const int h = h0 + hh;
    const int64_t orow = (static_cast<int64_t>(b) * p.Hq + h) * D + d;
    if (splits == 1) {
      const float gv = dev::load(p.gate, p.q_dtype, orow);
      dev::store(p.out, p.out_dtype, orow, (osum / lsum) * sigmoidf_(gv));
    } else {
      const int64_t wi = (static_cast<int64_t>(b) * p.Hq + h) * splits + z;
      p.workspace[wi * D + d] = osum;
      if (d == 0) {
        float* ml = p.workspace + static_cast<int64_t>(p.T) * p.Hq * splits * D;
        ml[2 * wi] = mx;
        ml[2 * wi + 1] = lsum;
      }
    }
  }
}

// Merge of the splits: grid (Hq, rows), block D threads.
__global__ void attn_decode_merge_kernel(const AttentionParams p) {
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const int D = p.D, splits = p.splits;
  const int64_t orow = (static_cast<int64_t>(b) * p.Hq + h) * D + d;
  int slot = -1, pos = 0;
  if (!resolve_row(p.meta, b, p.max_context, slot, pos)) {
    dev::store(p.out, p.out_dtype, orow, 0.0f);
    return;
  }
  const float* ml = p.workspace + static_cast<int64_t>(p.T) * p.Hq * splits * D;
  const int64_t w0 = (static_cast<int64_t>(b) * p.Hq + h) * splits;
  float mx = kNegInf;
  for (int z = 0; z < splits; ++z) mx = fmaxf(mx, ml[2 * (w0 + z)]);
  float lsum = 0.0f, osum = 0.0f;
  for (int z = 0; z < splits; ++z) {
    const float mz = ml[2 * (w0 + z)];
    if (mz == kNegInf) continue;
    const float c = expf(mz - mx);
    lsum = fmaf(ml[2 * (w0 + z) + 1], c, lsum);
    osum = fmaf(p.workspace[(w0 + z) * D + d], c, osum);
  }
  const float gv = dev::load(p.gate, p.q_dtype, orow);
  dev::store(p.out, p.out_dtype, orow, (osum / lsum) * sigmoidf_(gv));
}

// ---------------------------------------------------------------------------------------------
// Prefill. Block (query tile of BQ rows, q head h), 4 warps; warp w owns queries w*QPW ..
// (w+1)*QPW-1 of the tile. Per K/V tile of 32 positions: lane j scores key j for the warp's
// queries (q from smem, k row from padded smem), online softmax across the warp, then every lane
// accumulates D/32 output features (d = lane + 32 i) for its queries.
// Queries of the tile are processed per cache slot (a tile may span sequences).
constexpr int kPreThreads = 128;
constexpr int kPreWarps = kPreThreads / 32;
constexpr int kBK = 32;

template <int D>
struct PreCfg {
  static constexpr int BQ = D >= 256 ? 8 : 16;
  static constexpr int QPW = BQ / kPreWarps;
  static constexpr int F = D / 32;  // output features per lane
};

template <int D>
__global__ void __launch_bounds__(kPreThreads) attn_prefill_kernel(const AttentionParams p, int group, float scale) {
  constexpr int BQ = PreCfg<D>::BQ, QPW = PreCfg<D>::QPW, F = PreCfg<D>::F;
  constexpr int KW = D / 2 + 1;  // padded k row, in bf16 pairs (odd: conflict-free column reads)
  __shared__ __align__(16) float q_s[BQ][D];
  __shared__ __nv_bfloat162 k_s[kBK][KW];
  __shared__ __align__(16) __nv_bfloat16 v_s[kBK][D];
  __shared__ int q_slot[BQ], q_pos[BQ];

  const int tile = blockIdx.x, h = blockIdx.y, g = h / group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x < BQ) {
    const int t = tile * BQ + threadIdx.x;
    int slot = -1, pos = -1;
    if (!(t < p.T && resolve_row(p.meta, t, p.max_context, slot, pos))) slot = -1, pos = -1;
    q_slot[threadIdx.x] = slot;
    q_pos[threadIdx.x] = pos;
  }
  for (int i = threadIdx.x; i < BQ * D; i += kPreThreads) {
    const int qi = i / D, d = i % D;
    const int t = tile * BQ + qi;
    q_s[qi][d] = t < p.T ? dev::load(p.q, p.q_dtype, (static_cast<int64_t>(t) * p.Hq + h) * D + d) : 0.0f;
  }
  __syncthreads();

  float m[QPW], l[QPW], acc[QPW][F];
#pragma unroll
  for (int r = 0; r < QPW; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
#pragma unroll
    for (int f = 0; f < F; ++f) acc[r][f] = 0.0f;
  }
  uint32_t remaining = 0;
  for (int qi = 0; qi < BQ; ++qi) remaining |= (q_slot[qi] >= 0 ? 1u : 0u) << qi;
  const int64_t pos_stride = static_cast<int64_t>(p.Hkv) * D;
  const __nv_bfloat16* kc = static_cast<const __nv_bfloat16*>(p.k_cache);
  const __nv_bfloat16* vc = static_cast<const __nv_bfloat16*>(p.v_cache);

  while (remaining) {  // block-uniform
    const int slot = q_slot[__ffs(remaining) - 1];
    uint32_t active = 0;
    int kmax = 0;
    for (int qi = 0; qi < BQ; ++qi) {
      if (((remaining >> qi) & 1u) && q_slot[qi] == slot) {
        active |= 1u << qi;
        kmax = max(kmax, q_pos[qi] + 1);
      }
    }
    remaining &= ~active;
    const int64_t base = (static_cast<int64_t>(slot) * p.max_context * p.Hkv + g) * D;
    for (int kt = 0; kt < kmax; kt += kBK) {
      const int nk = min(kBK, kmax - kt);
      __syncthreads();  // the previous tile is consumed
      for (int i = threadIdx.x; i < kBK * (D / 8); i += kPreThreads) {
        const int r = i / (D / 8), c = i % (D / 8);
        uint4 ku = make_uint4(0, 0, 0, 0), vu = make_uint4(0, 0, 0, 0);
        if (r < nk) {
          const int64_t off = base + (kt + r) * pos_stride + c * 8;
          ku = *reinterpret_cast<const uint4*>(kc + off);
          vu = *reinterpret_cast<const uint4*>(vc + off);
        }
        const __nv_bfloat162* kh = reinterpret_cast<const __nv_bfloat162*>(&ku);
#pragma unroll
        for (int e = 0; e < 4; ++e) k_s[r][c * 4 + e] = kh[e];
        *reinterpret_cast<uint4*>(&v_s[r][c * 8]) = vu;
      }
      __syncthreads();
      // Scores: lane = key kt + lane.
      float dot[QPW];
#pragma unroll
      for (int r = 0; r < QPW; ++r) dot[r] = 0.0f;
#pragma unroll 4
      for (int d2 = 0; d2 < D / 2; ++d2) {
        const float2 kk = __bfloat1622float2(k_s[lane][d2]);
#pragma unroll
        for (int r = 0; r < QPW; ++r) {
          const float2 qq = *reinterpret_cast<const float2*>(&q_s[warp * QPW + r][2 * d2]);
          dot[r] = fmaf(qq.x, kk.x, dot[r]);
          dot[r] = fmaf(qq.y, kk.y, dot[r]);
        }
      }
      float pr[QPW];
#pragma unroll
      for (int r = 0; r < QPW; ++r) {
        const int qi = warp * QPW + r;
        const bool valid = ((active >> qi) & 1u) && lane < nk && kt + lane <= q_pos[qi];
        const float s = valid ? dot[r] * scale : kNegInf;
        float tm = s;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, off));
        const float mn = fmaxf(m[r], tm);
        if (mn == kNegInf) {  // warp-uniform: nothing valid yet for this query
          pr[r] = 0.0f;
          continue;
        }
        const float corr = expf(m[r] - mn);
        pr[r] = valid ? expf(s - mn) : 0.0f;
        float ps = pr[r];
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, off);
        l[r] = fmaf(l[r], corr, ps);
#pragma unroll
        for (int f = 0; f < F; ++f) acc[r][f] *= corr;
        m[r] = mn;
      }
      for (int j = 0; j < nk; ++j) {
        float vf[F];
#pragma unroll
        for (int f = 0; f < F; ++f) vf[f] = __bfloat162float(v_s[j][lane + 32 * f]);
#pragma unroll
        for (int r = 0; r < QPW; ++r) {
          const float pj = __shfl_sync(0xffffffffu, pr[r], j);
#pragma unroll
          for (int f = 0; f < F; ++f) acc[r][f] = fmaf(pj, vf[f], acc[r][f]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < QPW; ++r) {
    const int qi = warp * QPW + r;
    const int t = tile * BQ + qi;
    if (t >= p.T) continue;
    const bool live = q_slot[qi] >= 0;
#pragma unroll
    for (int f = 0; f < F; ++f) {
      const int d = lane + 32 * f;
      const int64_t orow = (static_cast<int64_t>(t) * p.Hq + h) * D + d;
      float y = 0.0f;
      if (live) y = (acc[r][f] / l[r]) * sigmoidf_(dev::load(p.gate, p.q_dtype, orow));
      dev::store(p.out, p.out_dtype, orow, y);
    }
  }
}

float attention_scale(int D) { return static_cast<float>(std::pow(static_cast<double>(D), -0.5)); }

bool common_ok(const AttentionParams& p) {
  if (p.T < 0 || !attention_supports(p.Hq, p.Hkv, p.D) || p.max_context <= 0) return false;
  if (p.cache_dtype != DType::bf16) return false;
  if (p.q_dtype != DType::bf16 && p.q_dtype != DType::f32) return false;
  if (p.out_dtype != DType::bf16 && p.out_dtype != DType::f32) return false;
  return p.q && p.gate && p.k_cache && p.v_cache && p.out && p.meta.positions && p.meta.token_seq && p.meta.slots;
}

template <int D>
void launch_decode(const AttentionParams& p, cudaStream_t stream) {
  DecArgs a{p, p.Hq / p.Hkv, 0, attention_scale(D)};
  a.hchunks = (a.group + kMaxG - 1) / kMaxG;
  const int G = std::min(kMaxG, a.group);
  const size_t smem = static_cast<size_t>(kDecWarps) * G * (D + 2) * sizeof(float);
  const dim3 grid(p.Hkv * a.hchunks, p.T, p.splits);
  attn_decode_kernel<D><<<grid, kDecThreads, smem, stream>>>(a);
  if (p.splits > 1) attn_decode_merge_kernel<<<dim3(p.Hq, p.T), D, 0, stream>>>(p);
}

template <int D>
void launch_prefill(const AttentionParams& p, cudaStream_t stream) {
  constexpr int BQ = PreCfg<D>::BQ;
  const dim3 grid((p.T + BQ - 1) / BQ, p.Hq);
  attn_prefill_kernel<D><<<grid, kPreThreads, 0, stream>>>(p, p.Hq / p.Hkv, attention_scale(D));
}

}  // namespace

bool attention_supports(int Hq, int Hkv, int D) {
  return Hq > 0 && Hkv > 0 && Hq % Hkv == 0 && (D == 32 || D == 64 || D == 128 || D == 256);
}

size_t attention_decode_workspace_bytes(int T, int Hq, int D, int splits) {
  if (splits <= 1) return 0;
  return static_cast<size_t>(T) * Hq * splits * (D + 2) * sizeof(float);
}

int attention_decode_pick_splits(int T, int Hq, int Hkv, int max_context, int num_sms) {
  if (T <= 0 || Hkv <= 0 || Hq <= 0) return 1;
  const int group = Hq / Hkv;
  const long blocks = static_cast<long>(T) * Hkv * ((group + kMaxG - 1) / kMaxG);
  const long want = 2L * std::max(num_sms, 1);
  long s = (want + blocks - 1) / blocks;
  s = std::min<long>(s, std::max(1, max_context / 256));
  return static_cast<int>(std::clamp<long>(s, 1, 32));
}

cudaError_t attention_decode(const AttentionParams& p, cudaStream_t stream) {
  if (!common_ok(p) || p.splits < 1 || p.splits > 1024) return cudaErrorInvalidValue;
  if (p.splits > 1 && !p.workspace) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  switch (p.D) {
    case 32: launch_decode<32>(p, stream); break;
    case 64: launch_decode<64>(p, stream); break;
    case 128: launch_decode<128>(p, stream); break;
    case 256: launch_decode<256>(p, stream); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t attention_prefill(const AttentionParams& p, cudaStream_t stream) {
  if (!common_ok(p)) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  switch (p.D) {
    case 32: launch_prefill<32>(p, stream); break;
    case 64: launch_prefill<64>(p, stream); break;
    case 128: launch_prefill<128>(p, stream); break;
    case 256: launch_prefill<256>(p, stream); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace sg
