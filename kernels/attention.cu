// attention.cu: the public attention entry points (validation, then the tuned or the generic
// kernels, see attention.h) and the tuned kernels: decode (split-K capable) and varlen prefill
// over the slot-indexed KV cache, bf16 or f32, for D in {32, 64, 128, 256}. f32 math, explicit
// fmaf, online softmax. The kernels are templated on the cache element type Tc; only the loads
// (and the prefill's key tile) depend on it, so both caches run the same f32 arithmetic on the
// values they hold. The generic kernel for other D is in attention_generic.cu.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention.h"
#include "kernels/attention_internal.cuh"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

using attn_detail::attention_scale;
using attn_detail::kNegInf;
using attn_detail::load_tile_rows;
using attn_detail::resolve_row;
using attn_detail::sigmoidf_;

// Cache element types: kVec elements per 16-byte load; the prefill stages k rows as Pairs.
template <typename Tc>
struct CacheVec;
template <>
struct CacheVec<__nv_bfloat16> {
  static constexpr int kVec = 8;
  using Pair = __nv_bfloat162;
};
template <>
struct CacheVec<float> {
  static constexpr int kVec = 4;
  using Pair = float2;
};

__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float2 to_f32(__nv_bfloat162 x) { return __bfloat1622float2(x); }
__device__ __forceinline__ float2 to_f32(float2 x) { return x; }

using dev::load8;

// ---------------------------------------------------------------------------------------------
// Decode. Block (kv head g x head chunk, row b, split z), 4 warps. A warp streams keys; its 32
// lanes form 32 / L sub-groups of L = D / 8 lanes, one key per sub-group per step, 8 features per
// lane (one 16-byte load of a k or v row chunk for bf16, two for f32). Every sub-group keeps an
// online softmax (m, l, o) per query head of the chunk; sub-groups, then warps, then splits are
// merged with the usual rescaling.
constexpr int kDecThreads = 128;
constexpr int kDecWarps = kDecThreads / 32;
constexpr int kMaxG = kAttentionDecodeMaxGroup;  // query heads per block (attention_shapes.h)
constexpr int kDecUnroll = 4;                    // keys per warp whose K/V loads are in flight together

struct DecArgs {
  AttentionParams p;
  int group, hchunks;
  float scale;
};

template <int D, typename Tc>
__global__ void __launch_bounds__(kDecThreads) attn_decode_kernel(const DecArgs a) {
  pdl_start();  // kernels/launch.cuh
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
    attn_detail::zero_padding_row(p, b, h0, G * D, splits);
    return;
  }
  int k0 = 0, k1 = 0;
  attn_detail::split_range(pos, splits, z, k0, k1);
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
  const Tc* kc = static_cast<const Tc*>(p.k_cache);  // [num_slots, max_context, Hkv, D]
  const Tc* vc = static_cast<const Tc*>(p.v_cache);  // [num_slots, max_context, Hkv, D]
  const int64_t base = (static_cast<int64_t>(slot) * p.max_context * p.Hkv + g) * D + d0;
  const int64_t pos_stride = static_cast<int64_t>(p.Hkv) * D;
  // Keys j = k0 + warp * KP + sub + i * step for i = 0, 1, ...; kDecUnroll of them are loaded
  // before any is used, so their memory latencies overlap (the keys and their order per lane are
  // those of a plain loop over i: the unroll changes no arithmetic).
  constexpr int step = kDecWarps * KP;
  for (int jb0 = k0 + warp * KP; jb0 < k1; jb0 += kDecUnroll * step) {  // warp-uniform trip count
    float kf[kDecUnroll][8], vf[kDecUnroll][8];
#pragma unroll
    for (int u = 0; u < kDecUnroll; ++u) {
      const int j = jb0 + u * step + sub;
      if (j < k1) {
        load8(kc + base + j * pos_stride, kf[u]);
        load8(vc + base + j * pos_stride, vf[u]);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) kf[u][e] = vf[u][e] = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kDecUnroll; ++u) {
      if (jb0 + u * step >= k1) break;  // warp-uniform, as the plain loop's condition
      const bool valid = jb0 + u * step + sub < k1;
#pragma unroll
      for (int hh = 0; hh < kMaxG; ++hh) {
        if (hh >= G) break;
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) dot = fmaf(qr[hh][e], kf[u][e], dot);
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
          for (int e = 0; e < 8; ++e) o[hh][e] = fmaf(pr, vf[u][e], o[hh][e]);
        }
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
  attn_detail::combine_warps<kDecWarps>(p, so, smx, sl, G, D, b, h0, splits, z);
}

// Merge of the splits: grid (Hq, rows), block D threads. Each split's maximum, sum and partial are
// loaded kMergeBatch splits at a time, before any of them is used: with a branch on each maximum as
// it came, the loop waited one L2 round trip a split (16 splits at one or two rows, a few us a
// layer). The same arithmetic in the same order as one split at a time: the maximum over the
// splits in order, then the sums in split order over the splits that saw a key.
constexpr int kMergeBatch = 8;
__global__ void attn_decode_merge_kernel(const AttentionParams p) {
  pdl_start();  // kernels/launch.cuh
  const int h = blockIdx.x, b = blockIdx.y, d = threadIdx.x;
  const int D = p.D, splits = p.splits;
  const int64_t orow = (static_cast<int64_t>(b) * p.Hq + h) * D + d;
  int slot = -1, pos = 0;
  if (!resolve_row(p.meta, b, p.max_context, slot, pos)) {
    dev::store(p.out, p.out_dtype, orow, 0.0f);
    return;
  }
  const float* ml = p.workspace + static_cast<int64_t>(p.T) * p.Hq * splits * D;  // [T, Hq, splits, 2]
  const int64_t w0 = (static_cast<int64_t>(b) * p.Hq + h) * splits;
  float mx = kNegInf;
  for (int z0 = 0; z0 < splits; z0 += kMergeBatch) {
    float m[kMergeBatch];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) m[j] = z0 + j < splits ? ml[2 * (w0 + z0 + j)] : kNegInf;
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) mx = fmaxf(mx, m[j]);
  }
  float lsum = 0.0f, osum = 0.0f;
  for (int z0 = 0; z0 < splits; z0 += kMergeBatch) {
    float m[kMergeBatch], l[kMergeBatch], o[kMergeBatch];
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      const bool in = z0 + j < splits;  // every split of a live row wrote its entries
      const int64_t w = w0 + z0 + j;
      m[j] = in ? ml[2 * w] : kNegInf;
      l[j] = in ? ml[2 * w + 1] : 0.0f;
      o[j] = in ? p.workspace[w * D + d] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kMergeBatch; ++j) {
      if (m[j] == kNegInf) continue;  // a split that saw no key
      const float c = expf(m[j] - mx);
      lsum = fmaf(l[j], c, lsum);
      osum = fmaf(o[j], c, osum);
    }
  }
  const float gv = dev::load(p.gate, p.q_dtype, orow);
  dev::store(p.out, p.out_dtype, orow, (osum / lsum) * sigmoidf_(gv));
}

// ---------------------------------------------------------------------------------------------
// Prefill. Block (query tile of BQ rows, q head h), 4 warps; warp w owns queries w*QPW ..
// (w+1)*QPW-1 of the tile. Per K/V tile of BK positions: lane j scores key j for the warp's
// queries (q from smem, k row from padded smem), online softmax across the warp, then every lane
// accumulates D/32 output features (d = lane + 32 i) for its queries.
// Queries of the tile are processed per cache slot (a tile may span sequences); a pass touches
// only its slot's rows, so non-finite cache values of one sequence never reach another's.
// BK = 32, except an f32 cache with D = 256: BK = 16 keeps the static shared memory under 48 KB
// (no opt-in attribute needed); then lanes j and j + 16 each score key j over half of D and add.
constexpr int kPreThreads = 128;
constexpr int kPreWarps = kPreThreads / 32;

template <int D, typename Tc>
struct PreCfg {
  using Pair = typename CacheVec<Tc>::Pair;
  static constexpr int BQ = D >= 256 ? 8 : 16;
  static constexpr int QPW = BQ / kPreWarps;
  static constexpr int F = D / 32;                                  // output features per lane
  static constexpr int BK = sizeof(Tc) == 4 && D >= 256 ? 16 : 32;  // key tile
  static constexpr int KS = 32 / BK;                                // lanes per key in the score loop
  static constexpr int KW = D / 2 + 1;  // padded k row, in pairs (odd: conflict-free column reads)
  // Static shared memory of the kernel: q_s, k_s, v_s, q_slot and q_pos.
  static constexpr size_t kSmem =
      sizeof(float) * BQ * D + sizeof(Pair) * BK * KW + sizeof(Tc) * BK * D + 2 * sizeof(int) * BQ;
  static_assert(KS == 1 || KS == 2, "a key is scored by one lane or two");
  static_assert(kSmem <= 48 * 1024, "static shared memory is limited to 48 KB");
};

template <int D, typename Tc>
__global__ void __launch_bounds__(kPreThreads) attn_prefill_kernel(const AttentionParams p, int group, float scale) {
  pdl_start();  // kernels/launch.cuh
  using Cfg = PreCfg<D, Tc>;
  using Pair = typename Cfg::Pair;
  constexpr int BQ = Cfg::BQ, QPW = Cfg::QPW, F = Cfg::F, BK = Cfg::BK, KS = Cfg::KS, KW = Cfg::KW;
  constexpr int V = CacheVec<Tc>::kVec;  // cache elements per 16-byte load
  __shared__ __align__(16) float q_s[BQ][D];
  __shared__ Pair k_s[BK][KW];
  __shared__ __align__(16) Tc v_s[BK][D];
  __shared__ int q_slot[BQ], q_pos[BQ];

  const int tile = blockIdx.x, h = blockIdx.y, g = h / group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  load_tile_rows(p, tile, BQ, q_slot, q_pos);
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
  const Tc* kc = static_cast<const Tc*>(p.k_cache);  // [num_slots, max_context, Hkv, D]
  const Tc* vc = static_cast<const Tc*>(p.v_cache);  // [num_slots, max_context, Hkv, D]

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
    for (int kt = 0; kt < kmax; kt += BK) {
      const int nk = min(BK, kmax - kt);
      __syncthreads();  // the previous tile is consumed
      for (int i = threadIdx.x; i < BK * (D / V); i += kPreThreads) {
        const int r = i / (D / V), c = i % (D / V);
        uint4 ku = make_uint4(0, 0, 0, 0), vu = make_uint4(0, 0, 0, 0);
        if (r < nk) {
          const int64_t off = base + (kt + r) * pos_stride + c * V;
          ku = *reinterpret_cast<const uint4*>(kc + off);
          vu = *reinterpret_cast<const uint4*>(vc + off);
        }
        const Pair* kh = reinterpret_cast<const Pair*>(&ku);
#pragma unroll
        for (int e = 0; e < V / 2; ++e) k_s[r][c * (V / 2) + e] = kh[e];
        *reinterpret_cast<uint4*>(&v_s[r][c * V]) = vu;
      }
      __syncthreads();
      // Scores: lane scores key kt + kj over feature pairs dp0 .. dp0 + DP - 1 (all of D when KS = 1).
      constexpr int DP = D / 2 / KS;
      const int kj = KS == 1 ? lane : lane % BK;
      const int dp0 = KS == 1 ? 0 : (lane / BK) * DP;
      float dot[QPW];
#pragma unroll
      for (int r = 0; r < QPW; ++r) dot[r] = 0.0f;
#pragma unroll 4
      for (int i = 0; i < DP; ++i) {
        const int d2 = dp0 + i;
        const float2 kk = to_f32(k_s[kj][d2]);
#pragma unroll
        for (int r = 0; r < QPW; ++r) {
          const float2 qq = *reinterpret_cast<const float2*>(&q_s[warp * QPW + r][2 * d2]);
          dot[r] = fmaf(qq.x, kk.x, dot[r]);
          dot[r] = fmaf(qq.y, kk.y, dot[r]);
        }
      }
      if constexpr (KS == 2) {  // add the other half of D; lanes >= BK then hold copies (never valid below)
#pragma unroll
        for (int r = 0; r < QPW; ++r) dot[r] += __shfl_xor_sync(0xffffffffu, dot[r], BK);
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
        for (int f = 0; f < F; ++f) vf[f] = to_f32(v_s[j][lane + 32 * f]);
#pragma unroll
        for (int r = 0; r < QPW; ++r) {
          // Rows of another slot (warp-uniform) take nothing from this slot's V: 0 * NaN would reach
          // them (sequence isolation); for finite V the skipped products are exact zeros.
          if (!((active >> (warp * QPW + r)) & 1u)) continue;
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

template <int D, typename Tc>
void launch_decode(const AttentionParams& p, cudaStream_t stream) {
  DecArgs a{p, p.Hq / p.Hkv, 0, attention_scale(D)};
  a.hchunks = (a.group + kMaxG - 1) / kMaxG;
  const int G = std::min(kMaxG, a.group);
  const size_t smem = static_cast<size_t>(kDecWarps) * G * (D + 2) * sizeof(float);
  const dim3 grid(p.Hkv * a.hchunks, p.T, p.splits);
  launch_kernel(attn_decode_kernel<D, Tc>, grid, kDecThreads, smem, stream, a);
  if (p.splits > 1) attn_detail::launch_decode_merge(p, stream);
}

template <int D, typename Tc>
void launch_prefill(const AttentionParams& p, cudaStream_t stream) {
  constexpr int BQ = PreCfg<D, Tc>::BQ;
  const dim3 grid((p.T + BQ - 1) / BQ, p.Hq);
  launch_kernel(attn_prefill_kernel<D, Tc>, grid, kPreThreads, 0, stream, p, p.Hq / p.Hkv, attention_scale(D));
}

// The D switches (cache element type Tc chosen by the caller); false for a D without a tuned kernel.
template <typename Tc>
bool decode_for_d(const AttentionParams& p, cudaStream_t stream) {
  switch (p.D) {
    case 32: launch_decode<32, Tc>(p, stream); return true;
    case 64: launch_decode<64, Tc>(p, stream); return true;
    case 128: launch_decode<128, Tc>(p, stream); return true;
    case 256: launch_decode<256, Tc>(p, stream); return true;
    default: return false;
  }
}

template <typename Tc>
bool prefill_for_d(const AttentionParams& p, cudaStream_t stream) {
  switch (p.D) {
    case 32: launch_prefill<32, Tc>(p, stream); return true;
    case 64: launch_prefill<64, Tc>(p, stream); return true;
    case 128: launch_prefill<128, Tc>(p, stream); return true;
    case 256: launch_prefill<256, Tc>(p, stream); return true;
    default: return false;
  }
}

}  // namespace

void attn_detail::launch_decode_merge(const AttentionParams& p, cudaStream_t stream) {
  launch_kernel(attn_decode_merge_kernel, dim3(p.Hq, p.T), p.D, 0, stream, p);
}

cudaError_t attention_decode(const AttentionParams& p, cudaStream_t stream) {
  LaunchCheck c("attention_decode");
  attn_detail::check_common(c, p);
  c.in_range(p.splits, 1, 1024, "splits").require(p.splits == 1 || p.workspace, "splits > 1 needs a workspace");
  if (!c.ok()) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  if (!attention_tuned_head_dim(p.D)) {
    attn_detail::launch_generic_decode(p, stream);
    return cudaGetLastError();
  }
  const bool ok = p.cache_dtype == DType::f32 ? decode_for_d<float>(p, stream) : decode_for_d<__nv_bfloat16>(p, stream);
  c.require(ok, "no tuned decode kernel for this head dim");
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

cudaError_t attention_prefill(const AttentionParams& p, cudaStream_t stream) {
  LaunchCheck c("attention_prefill");
  attn_detail::check_common(c, p);
  if (!c.ok()) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  if (!attention_tuned_head_dim(p.D)) {
    attn_detail::launch_generic_prefill(p, stream);
    return cudaGetLastError();
  }
  const bool ok =
      p.cache_dtype == DType::f32 ? prefill_for_d<float>(p, stream) : prefill_for_d<__nv_bfloat16>(p, stream);
  c.require(ok, "no tuned prefill kernel for this head dim");
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace sg
