// postconv_token_tile.cu: the post-conv `token_tile` arm, Dk = Dv = 128 only (the contract falls
// back to `fast` otherwise). Grid (ceil(T/16), Hk + Hv), 128 threads = 4 warps, 16 tokens per block,
// 4 per warp; everything in registers, no shared memory, no barrier.
//
// Work of a block: blocks start in linear order lin = x + y * gridDim.x; block lin does token tile
// lin / (Hk+Hv) (tokens 16 tile .. 16 tile + 15) and head y' = lin % (Hk+Hv), so the blocks that run
// together cover whole rows of a few tiles (DRAM locality, gates written while their sectors are in
// L2) and heavy q/k blocks interleave with light v blocks.
// Heads y' < Hk, q and k head y': per token, half-warp 0 holds the q row and half-warp 1 the k row;
// lane m (0..15) of a half holds the 8 consecutive features f = 8m + e (e = 0..7), one 16-byte
// load for bf16 (two for f32). All four tokens' rows are loaded before the first is used.
// Heads Hk + hv: v head hv of the 16 tokens, 8 features per thread and chunk (two chunks per
// thread, 16-byte vectors), and 16 of the tile's 16 x Hv gates (threads 0..15; run hv of the
// token-major order, so 64 contiguous bytes of g and of beta per block).
//
// The sum of squares reproduces the reference tree s[i] = s[i] + s[i + h], h = 64, 32, ..., 1
// exactly. Write the feature index in bits f = (f6 .. f0) = (m3 m2 m1 m0 e2 e1 e0) and name lane
// bits b3 b2 b1 b0 = m3 m2 m1 m0. Level h pairs the two indices that differ only in bit log2(h);
// each addition below adds exactly such a pair of current tree values (in one order or the other:
// f32 addition is commutative), level after level in the tree's order:
//   h = 64 (f6 = b3): lanes m and m ^ 8 hold the pair in the same slot e. Reduce-scatter: the lane
//      with b3 = 0 keeps e2 = 0 (slots 0..3), the lane with b3 = 1 keeps e2 = 1 (slots 4..7); each
//      sends the other half to its partner (__shfl_xor 8) and adds. Slot j (= e1 e0) now holds
//      s64[(0 m2 m1 m0 b3 j1 j0)].
//   h = 32 (f5 = b2): partner m ^ 4 holds the same index with f5 flipped in the same slot (e2 = b3
//      agrees). Keep e1 = b2 (slots j = 2 b2 + e0): slot e0 holds s32[(0 0 m1 m0 b3 b2 e0)].
//   h = 16 (f4 = b1): partner m ^ 2; keep e0 = b1: one value s16[(0 0 0 m0 b3 b2 b1)].
//   h = 8  (f3 = b0): partner m ^ 1 holds the same low bits (b3 b2 b1 agree): butterfly add, both
//      lanes now hold s8[(b3 b2 b1)].
//   h = 4  (f2 = b3): butterfly with m ^ 8 -> s4[(b2 b1)];  h = 2 (f1 = b2): m ^ 4 -> s2[(b1)];
//   h = 1  (f0 = b1): m ^ 2 -> s1[0], the tree's s[0], in all 16 lanes of the half.
// All shuffle offsets are < 16, so the two half-warps (q and k) reduce independently in the same
// instructions. 11 shuffles per pair of rows.
#include "kernels/postconv_common.cuh"

namespace sg::postconv_detail {
namespace {

constexpr int kD = 128;                      // Dk = Dv
constexpr int kTile = kPostconvTokenTile;    // 16 tokens per block
constexpr int kWarpTokens = kTile / 4;       // 4 tokens per warp

// Eight consecutive elements of one row, exactly as stored.
template <DType T>
struct Raw8;
template <>
struct Raw8<DType::bf16> {
  uint4 u;  // element 2k in the low half of word k, 2k + 1 in the high half
};
template <>
struct Raw8<DType::f32> {
  float4 lo, hi;
};

// Elements [i, i + 8) of `base`. kVec: 16-byte loads (the caller guarantees alignment).
template <DType T, bool kVec>
__device__ __forceinline__ Raw8<T> load8(const void* base, int64_t i) {
  Raw8<T> r;
  if constexpr (T == DType::bf16) {
    const auto* p = static_cast<const uint16_t*>(base) + i;
    if constexpr (kVec) {
      r.u = __ldg(reinterpret_cast<const uint4*>(p));
    } else {
      uint32_t w[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) w[k] = static_cast<uint32_t>(p[2 * k]) | (static_cast<uint32_t>(p[2 * k + 1]) << 16);
      r.u = make_uint4(w[0], w[1], w[2], w[3]);
    }
  } else {
    const float* p = static_cast<const float*>(base) + i;
    if constexpr (kVec) {
      r.lo = __ldg(reinterpret_cast<const float4*>(p));
      r.hi = __ldg(reinterpret_cast<const float4*>(p) + 1);
    } else {
      r.lo = make_float4(p[0], p[1], p[2], p[3]);
      r.hi = make_float4(p[4], p[5], p[6], p[7]);
    }
  }
  return r;
}

// bf16 -> f32 is exact (the bits shifted into the high half), as __bfloat162float.
__device__ __forceinline__ void to_f32(const Raw8<DType::bf16>& r, float (&x)[8]) {
  const uint32_t w[4] = {r.u.x, r.u.y, r.u.z, r.u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    x[2 * k] = __uint_as_float(w[k] << 16);
    x[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
__device__ __forceinline__ void to_f32(const Raw8<DType::f32>& r, float (&x)[8]) {
  x[0] = r.lo.x, x[1] = r.lo.y, x[2] = r.lo.z, x[3] = r.lo.w;
  x[4] = r.hi.x, x[5] = r.hi.y, x[6] = r.hi.z, x[7] = r.hi.w;
}

// Stores the raw elements [i, i + 8) of `base` (a same-dtype copy: exact).
template <DType T, bool kVec>
__device__ __forceinline__ void store_raw8(void* base, int64_t i, const Raw8<T>& r) {
  if constexpr (T == DType::bf16) {
    auto* p = static_cast<uint16_t*>(base) + i;
    if constexpr (kVec) {
      *reinterpret_cast<uint4*>(p) = r.u;
    } else {
      const uint32_t w[4] = {r.u.x, r.u.y, r.u.z, r.u.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        p[2 * k] = static_cast<uint16_t>(w[k] & 0xffffu);
        p[2 * k + 1] = static_cast<uint16_t>(w[k] >> 16);
      }
    }
  } else {
    float* p = static_cast<float*>(base) + i;
    if constexpr (kVec) {
      reinterpret_cast<float4*>(p)[0] = r.lo;
      reinterpret_cast<float4*>(p)[1] = r.hi;
    } else {
      p[0] = r.lo.x, p[1] = r.lo.y, p[2] = r.lo.z, p[3] = r.lo.w;
      p[4] = r.hi.x, p[5] = r.hi.y, p[6] = r.hi.z, p[7] = r.hi.w;
    }
  }
}

// Stores y[0..8) as elements [i, i + 8) of `base`, rounding once to nearest even for bf16 (the
// paired conversion rounds each element exactly as __float2bfloat16_rn, dev::store's rounding).
template <DType T, bool kVec>
__device__ __forceinline__ void store8(void* base, int64_t i, const float (&y)[8]) {
  Raw8<T> r;
  if constexpr (T == DType::bf16) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const __nv_bfloat162 h2 = __floats2bfloat162_rn(y[2 * k], y[2 * k + 1]);  // .x low, .y high
      w[k] = static_cast<uint32_t>(__bfloat16_as_ushort(h2.x)) | (static_cast<uint32_t>(__bfloat16_as_ushort(h2.y)) << 16);
    }
    r.u = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    r.lo = make_float4(y[0], y[1], y[2], y[3]);
    r.hi = make_float4(y[4], y[5], y[6], y[7]);
  }
  store_raw8<T, kVec>(base, i, r);
}

// The tree sum of sq[0..8) over the 16 lanes of this lane's half-warp (header comment), returned in
// every lane of the half. All 32 lanes must call it.
__device__ __forceinline__ float tree_sum_128_by8(const float (&sq)[8], int lane) {
  const bool b3 = lane & 8, b2 = lane & 4, b1 = lane & 2;
  float s4[4];  // h = 64: keep e2 = b3
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float keep = b3 ? sq[j + 4] : sq[j];
    const float send = b3 ? sq[j] : sq[j + 4];
    s4[j] = keep + __shfl_xor_sync(kFullMask, send, 8);
  }
  float s2[2];  // h = 32: keep e1 = b2
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float keep = b2 ? s4[j + 2] : s4[j];
    const float send = b2 ? s4[j] : s4[j + 2];
    s2[j] = keep + __shfl_xor_sync(kFullMask, send, 4);
  }
  // h = 16: keep e0 = b1
  float s = (b1 ? s2[1] : s2[0]) + __shfl_xor_sync(kFullMask, b1 ? s2[0] : s2[1], 2);
  s = s + __shfl_xor_sync(kFullMask, s, 1);  // h = 8
  s = s + __shfl_xor_sync(kFullMask, s, 8);  // h = 4
  s = s + __shfl_xor_sync(kFullMask, s, 4);  // h = 2
  s = s + __shfl_xor_sync(kFullMask, s, 2);  // h = 1
  return s;
}

template <DType kIn, DType kOut, bool kVec>
__global__ void __launch_bounds__(128) postconv_token_tile_kernel(const PostconvParams p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // Blocks start in linear order (x fastest). Map that order tile-major, head-minor, so the blocks
  // running together cover whole rows of a few token tiles (DRAM locality; a tile's gates written
  // while its sectors are still in L2) and heavy q/k blocks interleave with light v blocks.
  const int nh = p.Hk + p.Hv;
  const int lin = blockIdx.x + blockIdx.y * gridDim.x;
  const int t0 = (lin / nh) * kTile, y = lin % nh;

  if (y < p.Hk) {
    const int half = lane >> 4, m = lane & 15;
    const int64_t col = (half ? static_cast<int64_t>(p.Hk) * kD : 0) + static_cast<int64_t>(y) * kD + 8 * m;
    void* out = half ? p.k : p.q;
    const int tw = t0 + warp * kWarpTokens;  // this warp's first token
    Raw8<kIn> r[kWarpTokens] = {};
#pragma unroll
    for (int i = 0; i < kWarpTokens; ++i) {
      if (tw + i < p.T) r[i] = load8<kIn, kVec>(p.conv, static_cast<int64_t>(tw + i) * p.conv_stride + col);
    }
    // The four tokens are independent chains (no early exit: rows past T are zeros and not stored),
    // so their shuffles, square roots and divisions overlap.
    float inv[kWarpTokens];
#pragma unroll
    for (int i = 0; i < kWarpTokens; ++i) {
      float x[8], sq[8];
      to_f32(r[i], x);
#pragma unroll
      for (int e = 0; e < 8; ++e) sq[e] = x[e] * x[e];
      inv[i] = tree_sum_128_by8(sq, lane);
    }
#pragma unroll
    for (int i = 0; i < kWarpTokens; ++i) inv[i] = 1.0f / sqrtf(inv[i] + 1e-6f);
#pragma unroll
    for (int i = 0; i < kWarpTokens; ++i) {
      const int t = tw + i;
      if (t >= p.T) break;  // warp-uniform
      float x[8];
      to_f32(r[i], x);
#pragma unroll
      for (int e = 0; e < 8; ++e) x[e] = x[e] * inv[i];
      store8<kOut, kVec>(out, (static_cast<int64_t>(t) * p.Hk + y) * kD + 8 * m, x);
    }
    return;
  }

  // v head hv of tokens t0 .. t0 + 15: chunk c = tid + 128 u (u = 0, 1) is token c / 16, features
  // 8 (c % 16) .. + 7. Loads first, then the gates (their loads join those in flight), then stores.
  const int hv = y - p.Hk;
  const int64_t vcol = 2 * static_cast<int64_t>(p.Hk) * kD + static_cast<int64_t>(hv) * kD;
  Raw8<kIn> r[2] = {};
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int c = threadIdx.x + 128 * u, t = t0 + (c >> 4);
    if (t < p.T) r[u] = load8<kIn, kVec>(p.conv, static_cast<int64_t>(t) * p.conv_stride + vcol + 8 * (c & 15));
  }
  // The tile's 16 x Hv gates, token-major, are split into Hv runs of 16: this block computes run hv
  // (threads 0..15, one gate each), so its g and beta stores are 64 contiguous bytes each.
  if (threadIdx.x < static_cast<unsigned>(kTile)) {
    const int i = hv * kTile + static_cast<int>(threadIdx.x);
    const int t = t0 + i / p.Hv;
    if (t < p.T) gates_one(p, t, i % p.Hv);
  }
#pragma unroll
  for (int u = 0; u < 2; ++u) {
    const int c = threadIdx.x + 128 * u, t = t0 + (c >> 4);
    if (t >= p.T) continue;
    const int64_t o = (static_cast<int64_t>(t) * p.Hv + hv) * kD + 8 * (c & 15);
    if constexpr (kIn == kOut) {
      store_raw8<kOut, kVec>(p.v, o, r[u]);
    } else {
      float x[8];
      to_f32(r[u], x);
      store8<kOut, kVec>(p.v, o, x);
    }
  }
}

template <DType kIn, DType kOut>
void launch_typed(const PostconvParams& p, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool vec) {
  if (vec) {
    postconv_token_tile_kernel<kIn, kOut, true><<<grid, block, smem, stream>>>(p);
  } else {
    postconv_token_tile_kernel<kIn, kOut, false><<<grid, block, smem, stream>>>(p);
  }
}

}  // namespace

cudaError_t launch_token_tile(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream) {
  if (p.Dk != kD || p.Dv != kD || c.block.x != 128 || c.block.y != 1 || c.block.z != 1) return cudaErrorInvalidValue;
  // 16-byte vectors need 16-byte aligned rows: base pointers and the conv row pitch (the column
  // offsets are multiples of 8 elements).
  const auto a16 = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15u) == 0; };
  const bool vec = a16(p.conv) && (p.conv_stride * static_cast<int64_t>(dtype_size(p.conv_dtype))) % 16 == 0 &&
                   a16(p.q) && a16(p.k) && a16(p.v);
  const dim3 grid(c.grid.x, c.grid.y, c.grid.z), block(c.block.x, c.block.y, c.block.z);
  const bool in_bf16 = p.conv_dtype == DType::bf16, out_bf16 = p.qkv_dtype == DType::bf16;
  if (in_bf16 && out_bf16) {
    launch_typed<DType::bf16, DType::bf16>(p, grid, block, c.smem_bytes, stream, vec);
  } else if (in_bf16) {
    launch_typed<DType::bf16, DType::f32>(p, grid, block, c.smem_bytes, stream, vec);
  } else if (out_bf16) {
    launch_typed<DType::f32, DType::bf16>(p, grid, block, c.smem_bytes, stream, vec);
  } else {
    launch_typed<DType::f32, DType::f32>(p, grid, block, c.smem_bytes, stream, vec);
  }
  return cudaGetLastError();
}

}  // namespace sg::postconv_detail
