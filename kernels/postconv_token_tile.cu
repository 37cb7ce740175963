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
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/postconv_common.cuh"

namespace sg::postconv_detail {
namespace {

constexpr int kD = 128;                    // Dk = Dv
constexpr int kTile = kPostconvTokenTile;  // 16 tokens per block
constexpr int kWarpTokens = kTile / 4;     // 4 tokens per warp

template <DType kIn, DType kOut, bool kVec>
__global__ void __launch_bounds__(128) postconv_token_tile_kernel(const PostconvParams p) {
  pdl_start();  // kernels/launch.cuh
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
    launch_kernel(postconv_token_tile_kernel<kIn, kOut, true>, grid, block, smem, stream, p);
  } else {
    launch_kernel(postconv_token_tile_kernel<kIn, kOut, false>, grid, block, smem, stream, p);
  }
}

}  // namespace

cudaError_t launch_token_tile(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream) {
  LaunchCheck chk("postconv (token_tile)");
  chk.require(p.Dk == kD && p.Dv == kD, "token_tile needs Dk = Dv = 128");
  chk.require(c.block.x == 128 && c.block.y == 1 && c.block.z == 1, "the contract: token_tile runs 128-thread blocks");
  if (!chk.ok()) return cudaErrorInvalidValue;
  // 16-byte vectors need 16-byte aligned rows: base pointers and the conv row pitch (the column
  // offsets are multiples of 8 elements).
  const bool vec = dev::aligned16(p.conv) &&
                   (p.conv_stride * static_cast<int64_t>(dtype_size(p.conv_dtype))) % 16 == 0 && dev::aligned16(p.q) &&
                   dev::aligned16(p.k) && dev::aligned16(p.v);
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
