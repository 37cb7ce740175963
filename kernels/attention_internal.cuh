// attention_internal.cuh: private to kernels/attention.cu and kernels/attention_generic.cu: the
// device helpers both kernel families share (row resolution, the output gate, the scale), the
// split-K merge launcher (defined in attention.cu, used by both decodes) and the generic pair's
// launchers (defined in attention_generic.cu). The launchers only launch: the public entry points
// in attention.cu validate the params first and return cudaGetLastError() after.
#pragma once
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/attention.h"
#include "kernels/device_util.cuh"
#include "kernels/launch_check.h"

namespace sg::attn_detail {

constexpr float kNegInf = -INFINITY;

// True when row t is live; then slot and pos are its cache coordinates (the rule of attn_prep.h:
// t < *num_tokens when set, token_seq >= 0, slots[seq] >= 0, 0 <= pos < max_context).
__device__ __forceinline__ bool resolve_row(const AttnTokenMeta& m, int t, int max_context, int& slot, int& pos) {
  if (m.num_tokens && t >= *m.num_tokens) return false;
  const int s = m.token_seq[t];
  if (s < 0) return false;
  slot = m.slots[s];
  if (slot < 0) return false;
  pos = m.positions[t];
  return pos >= 0 && pos < max_context;
}

// Threads 0 .. rows - 1 resolve the rows of query tile `tile` (rows a tile) into q_slot / q_pos
// (-1, -1: past T, padding or past the live count). The caller synchronises before reading them.
__device__ __forceinline__ void load_tile_rows(const AttentionParams& p, int tile, int rows, int* q_slot, int* q_pos) {
  if (threadIdx.x < static_cast<unsigned>(rows)) {
    const int t = tile * rows + threadIdx.x;
    int slot = -1, pos = -1;
    if (!(t < p.T && resolve_row(p.meta, t, p.max_context, slot, pos))) slot = -1, pos = -1;
    q_slot[threadIdx.x] = slot;
    q_pos[threadIdx.x] = pos;
  }
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// D^-0.5 as float(pow(double(D), -0.5)).
inline float attention_scale(int D) { return static_cast<float>(std::pow(static_cast<double>(D), -0.5)); }

// Split z of `splits` over the ctx = pos + 1 cached positions of a decode row: [k0, k1), empty
// when k0 >= k1 (possible only for z > 0).
__device__ __forceinline__ void split_range(int pos, int splits, int z, int& k0, int& k1) {
  const int ctx = pos + 1;
  const int chunk = (ctx + splits - 1) / splits;
  k0 = z * chunk;
  k1 = min(ctx, k0 + chunk);
}

// A padding decode row: the block writes zeros to the n = G * D outputs of its query heads h0 ..
// when splits == 1; with splits > 1 the merge kernel writes them.
__device__ __forceinline__ void zero_padding_row(const AttentionParams& p, int b, int h0, int n, int splits) {
  if (splits != 1) return;
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    dev::store(p.out, p.out_dtype, (static_cast<int64_t>(b) * p.Hq + h0) * p.D + i, 0.0f);
}

// Feature d of query head h of row b, merged over a block's warps (osum, lsum at the running
// maximum mx): with splits == 1 the output (o / l) * sigmoid(gate); else split z's partial into
// the workspace ([T, Hq, splits, D] partial o, then [T, Hq, splits, 2] (max, sum)).
__device__ __forceinline__ void store_head_feature(const AttentionParams& p, int b, int h, int d, int splits, int z,
                                                   float osum, float mx, float lsum) {
  const int64_t orow = (static_cast<int64_t>(b) * p.Hq + h) * p.D + d;
  if (splits == 1) {
    const float gv = dev::load(p.gate, p.q_dtype, orow);
    dev::store(p.out, p.out_dtype, orow, (osum / lsum) * sigmoidf_(gv));
  } else {
    const int64_t wi = (static_cast<int64_t>(b) * p.Hq + h) * splits + z;
    p.workspace[wi * p.D + d] = osum;
    if (d == 0) {
      float* ml = p.workspace + static_cast<int64_t>(p.T) * p.Hq * splits * p.D;
      ml[2 * wi] = mx;
      ml[2 * wi + 1] = lsum;
    }
  }
}

// The end of a decode block: W warps left partials of the G query heads h0 .. h0 + G - 1 of row b
// in shared memory (so [W][G][D] unnormalised outputs, smx [W][G] running maxima, sl [W][G] sums;
// a warp that saw no key holds -inf, 0, 0). They are merged in warp order, rescaled to the largest
// maximum, and stored (store_head_feature). Every thread calls it (after a barrier that makes the
// partials visible).
template <int W>
__device__ __forceinline__ void combine_warps(const AttentionParams& p, const float* so, const float* smx,
                                              const float* sl, int G, int D, int b, int h0, int splits, int z) {
  for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
    const int hh = i / D, d = i % D;
    float mx = kNegInf;
    for (int w = 0; w < W; ++w) mx = fmaxf(mx, smx[w * G + hh]);
    float lsum = 0.0f, osum = 0.0f;
    if (mx != kNegInf) {
      for (int w = 0; w < W; ++w) {
        const float c = expf(smx[w * G + hh] - mx);
        lsum = fmaf(sl[w * G + hh], c, lsum);
        osum = fmaf(so[(w * G + hh) * D + d], c, osum);
      }
    }
    store_head_feature(p, b, h0 + hh, d, splits, z, osum, mx, lsum);
  }
}

// Host: the checks both tensor-core kernels share (out dtype, every pointer set, q / gate / caches
// 16-byte aligned).
// The checks every attention launcher makes (a failure names the field: launch_check.h).
inline void check_common(LaunchCheck& c, const AttentionParams& p) {
  c.in_range(p.T, 0, INT32_MAX, "T").in_range(p.Hq, 1, INT32_MAX, "Hq").in_range(p.Hkv, 1, INT32_MAX, "Hkv");
  c.require(p.Hkv < 1 || p.Hq % p.Hkv == 0, "Hq must be a multiple of Hkv");
  c.in_range(p.D, 1, kAttentionMaxD, "D").in_range(p.max_context, 1, INT32_MAX, "max_context");
  c.require(p.cache_dtype == DType::bf16 || p.cache_dtype == DType::f32, "cache_dtype must be bf16 or f32");
  c.require(p.q_dtype == DType::bf16 || p.q_dtype == DType::f32, "q_dtype must be bf16 or f32");
  c.require(p.out_dtype == DType::bf16 || p.out_dtype == DType::f32, "out_dtype must be bf16 or f32");
  c.not_null(p.q, "q").not_null(p.gate, "gate").not_null(p.k_cache, "k_cache").not_null(p.v_cache, "v_cache");
  c.not_null(p.out, "out").not_null(p.meta.positions, "meta.positions").not_null(p.meta.token_seq, "meta.token_seq");
  c.not_null(p.meta.slots, "meta.slots");
  c.require(dev::aligned16(p.k_cache) && dev::aligned16(p.v_cache), "k_cache and v_cache must be 16-byte aligned");
}

// What the mma kernels check beyond check_common: q and gate are read 16 bytes at a time too.
inline void check_mma(LaunchCheck& c, const AttentionParams& p) {
  c.require(dev::aligned16(p.q) && dev::aligned16(p.gate), "q and gate must be 16-byte aligned");
}

// Merges the split-K partials of a decode (workspace layout: attention_decode_workspace_bytes)
// into out = (o / l) * sigmoid(gate); padding rows get zeros. Grid (Hq, T), block D threads.
void launch_decode_merge(const AttentionParams& p, cudaStream_t stream);

// The generic pair (any D in 1..kAttentionMaxD): decode with p.splits splits (then the merge when
// splits > 1), prefill as one split over every row.
void launch_generic_decode(const AttentionParams& p, cudaStream_t stream);
void launch_generic_prefill(const AttentionParams& p, cudaStream_t stream);

}  // namespace sg::attn_detail
