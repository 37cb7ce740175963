// attention_decode_mma.cu: the tensor-core decode (attention_decode_mma.h) for a bf16 cache and
// bf16 q / gate, D in {64, 128, 256}, G = Hq / Hkv <= 8: mma.sync m16n8k16 bf16 -> f32.
//
// Design. Block (kv head g, row b, split z), 4 warps; the split's context positions [k0, k1) are
// cut into tiles of 16 keys, warp w takes tiles w, w + 4, w + 8, ... and runs its own online
// softmax over them (flash-decoding inside the block); the 4 warps' partials are merged at the
// end in shared memory (attn_detail::combine_warps, as the CUDA-core kernel does). Each warp
// streams its tiles through its own ring of 3 shared-memory stages (K and V rows of 16 keys,
// cp.async 16 bytes, zero-filled past k1), so two tiles are in flight while it computes one:
// 4 x 2 x 16 KB per SM at D = 256, what the memory system needs to run at full bandwidth. Rows
// of 16-byte chunks are XOR-swizzled (chunk c of key r at c ^ (r & 7)), so ldmatrix is
// bank-conflict free. Per tile, per warp:
//   S [16 x 16] = Q K^T    A = Q (rows = the G query heads, zero rows past G; fragments kept in
//                          registers for the whole block), B = K rows by ldmatrix:
//                          D/16 k-steps x 2 n-tiles.
//   online softmax         per head (S row): s = acc * scale, masked to -inf past k1;
//                          m' = max(m, max s); corr = expf(m - m'); p = expf(s - m');
//                          l = fmaf(l, corr, sum p) (the f32 p); O *= corr
//   O^T [D x 8] += V^T P^T A = V^T by ldmatrix.trans, B = P^T: the S accumulators of a thread are
//                          exactly its B fragment of P^T (row = head, columns = keys), split into
//                          P_hi + P_lo (bf16 each): 2 mma per (m-tile of 16 features). Heads are
//                          the 8 columns, so O takes D/2 registers per thread, not D.
// then out = (O / l) * sigmoid(gate) (or the split's partial into the workspace).
// Grid (Hkv, T, splits) from the shape only; no allocation, no host synchronisation. A block
// reads one sequence's cache only: a non-finite value in one sequence never reaches another.
// Error versus the f32 CUDA-core kernel: as derived in attention_prefill_mma.cu (exact bf16
// products, f32 accumulation in another order, the P split leaving <= 2^-16 of each p).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/attention_decode_mma.h"
#include "kernels/attention_internal.cuh"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"

namespace sg {
namespace {

using attn_detail::attention_scale;
using attn_detail::kNegInf;
using attn_detail::resolve_row;
using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::ldmatrix_x4;
using mma::ldmatrix_x4_trans;
using mma::mma_bf16;
using mma::smem_addr;

constexpr int kThreads = 128;  // 4 warps
constexpr int kWarps = kThreads / 32;
constexpr int kKeys = 16;   // keys per tile (the k of the P V mma)
constexpr int kStages = 3;  // tiles per warp ring: two in flight while one is computed
constexpr int kMaxG = 8;    // query heads per kv head (the n of an mma tile)

template <int D>
struct DecCfg {
  static constexpr int CH = D / 8;                // 16-byte chunks per key row
  static constexpr int KSTEPS = D / 16;           // k-steps of S = Q K^T
  static constexpr int MT = D / 16;               // m-tiles of O^T (16 features each)
  static constexpr int kStage = 2 * kKeys * D;    // bf16 elements of a stage: K rows, then V rows
  static constexpr int kRing = kStages * kStage;  // bf16 elements of a warp's ring
  static constexpr size_t kSmem = static_cast<size_t>(kWarps) * kRing * 2;
  static_assert(CH >= 8 && CH <= 32 && (kKeys * CH) % 32 == 0, "the swizzle needs 8..32 chunks per row");
  static_assert(kSmem == attention_decode_mma_smem(D), "the bytes the model plans with (attention_shapes.h)");
  // The merge of the warps' partials reuses the rings.
  static_assert(kWarps * kMaxG * (D + 2) * sizeof(float) <= kSmem, "merge buffers fit the rings");
};

// Offset (bf16 elements) of chunk c of key row r within a stage's K (or V) rows.
template <int D>
__device__ __forceinline__ int swz(int r, int c) {
  return r * D + ((c ^ (r & 7)) << 3);
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1) attn_decode_mma_kernel(const AttentionParams p, int group, float scale) {
  using Cfg = DecCfg<D>;
  constexpr int CH = Cfg::CH, KSTEPS = Cfg::KSTEPS, MT = Cfg::MT;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int g = blockIdx.x, b = blockIdx.y, z = blockIdx.z, splits = gridDim.z;
  const int G = group, h0 = g * group;
  int slot = -1, pos = 0;
  // The row's slot and position are step metadata, which may be read before the dependency wait
  // (kernels/launch.cuh); the padding row's zeros are a write, so they follow it.
  if (!resolve_row(p.meta, b, p.max_context, slot, pos)) {
    pdl_start();
    attn_detail::zero_padding_row(p, b, h0, G * D, splits);
    return;
  }
  int k0 = 0, k1 = 0;
  attn_detail::split_range(pos, splits, z, k0, k1);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int gq = lane >> 2, tq = lane & 3;  // fragment row / column pair

  const auto* kc = static_cast<const __nv_bfloat16*>(p.k_cache);  // [num_slots, max_context, Hkv, D]
  const auto* vc = static_cast<const __nv_bfloat16*>(p.v_cache);  // [num_slots, max_context, Hkv, D]
  const int64_t base = (static_cast<int64_t>(slot) * p.max_context * p.Hkv + g) * D;
  const int64_t pos_stride = static_cast<int64_t>(p.Hkv) * D;
  __nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(smem_raw) + warp * Cfg::kRing;  // this warp's stages

  const int ntiles = k1 > k0 ? (k1 - k0 + kKeys - 1) / kKeys : 0;
  const int mine = warp < ntiles ? (ntiles - warp + kWarps - 1) / kWarps : 0;  // warp-uniform
  // The warp's i-th tile (keys k0 + 16 (warp + 4 i) ..) into stage i % kStages; rows past k1 zero.
  auto issue = [&](int i) {
    const int kb = k0 + kKeys * (warp + kWarps * i);
    __nv_bfloat16* ks_ = ring + (i % kStages) * Cfg::kStage;
    __nv_bfloat16* vs_ = ks_ + kKeys * D;
#pragma unroll
    for (int it = 0; it < kKeys * CH / 32; ++it) {
      const int idx = lane + 32 * it, r = idx / CH, c = idx % CH;
      const int j = kb + r;
      const bool ok = j < k1;
      const int64_t off = base + (ok ? j : k0) * pos_stride + c * 8;
      cp_async16(smem_addr(ks_ + swz<D>(r, c)), kc + off, ok);
      cp_async16(smem_addr(vs_ + swz<D>(r, c)), vc + off, ok);
    }
  };
  // The first tiles are requested before the dependency wait where every key they hold precedes
  // pos: earlier steps wrote those cache rows, and this step's attn_prep writes row pos alone (of
  // this slot, which no other row of the step has), so the cache stream starts while attn_prep
  // finishes. The warp's tiles ascend, so the early ones are a prefix and the commit groups keep
  // the tiles' order: group i is tile i.
  int first = 0;  // tiles issued before the wait
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    const int kb = k0 + kKeys * (warp + kWarps * i);
    if (i < mine && i == first && min(kb + kKeys, k1) <= pos) {
      issue(i);
      cp_async_commit();
      ++first;
    }
  }
  pdl_start();  // kernels/launch.cuh: q and the cache row pos come from the kernels before
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) {
    if (i < first) continue;
    if (i < mine) issue(i);
    cp_async_commit();  // empty groups keep the count uniform
  }

  // Q as the A operand of S: rows gq < G are the heads h0 + gq; a1, a3 (rows 8..15) are zero.
  const auto* q = static_cast<const __nv_bfloat16*>(p.q);  // [T, Hq, D]
  uint32_t qa[KSTEPS][2];
#pragma unroll
  for (int ks = 0; ks < KSTEPS; ++ks) {
    const __nv_bfloat16* qr = q + (static_cast<int64_t>(b) * p.Hq + h0 + gq) * D + 16 * ks + 2 * tq;
    qa[ks][0] = gq < G ? mma::lds32(qr) : 0u;
    qa[ks][1] = gq < G ? mma::lds32(qr + 8) : 0u;
  }

  float o[MT][4];  // O^T: (feature 16 mt + gq (+8), head 2 tq (+1))
#pragma unroll
  for (int j = 0; j < MT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m = kNegInf, l = 0.0f;  // head gq (every lane of the quad holds the same)

  for (int i = 0; i < mine; ++i) {
    if (i + kStages - 1 < mine) issue(i + kStages - 1);  // into the stage consumed at i - 1
    cp_async_commit();
    cp_async_wait<kStages - 1>();  // this lane's copies of tile i landed
    __syncwarp();                  // ... and every lane's
    const __nv_bfloat16* ks_ = ring + (i % kStages) * Cfg::kStage;
    const __nv_bfloat16* vs_ = ks_ + kKeys * D;
    const int kb = k0 + kKeys * (warp + kWarps * i);

    // S = Q K^T: n-tile nt holds keys kb + 8 nt ..; one ldmatrix.x4 gives b0 b1 of two k-steps
    // (lanes 8 q .. 8 q + 7 address chunk 2 ks + q of their key row).
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
      const int r = 8 * nt + (lane & 7);
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ks += 2) {
        uint32_t bk[4];
        ldmatrix_x4(bk, smem_addr(ks_ + swz<D>(r, 2 * ks + (lane >> 3))));
        const uint32_t a0[4] = {qa[ks][0], 0u, qa[ks][1], 0u};
        const uint32_t a1[4] = {qa[ks + 1][0], 0u, qa[ks + 1][1], 0u};
        mma_bf16(s[nt], a0, bk[0], bk[1]);
        mma_bf16(s[nt], a1, bk[2], bk[3]);
      }
    }
    // Online softmax of head gq over the tile's keys kb + 8 nt + 2 tq + c (quad-wide).
    float mx = kNegInf;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const bool valid = kb + 8 * nt + 2 * tq + c < k1;
        s[nt][c] = valid ? s[nt][c] * scale : kNegInf;
        mx = fmaxf(mx, s[nt][c]);
      }
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(m, mx);  // finite: the tile's first key is valid
    float ps = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float pr = s[nt][c] == kNegInf ? 0.0f : expf(s[nt][c] - mn);
        s[nt][c] = pr;
        ps += pr;
      }
    }
    ps += __shfl_xor_sync(0xffffffffu, ps, 1);
    ps += __shfl_xor_sync(0xffffffffu, ps, 2);
    const float corr = expf(m - mn);  // 0 while m is -inf
    l = fmaf(l, corr, ps);
    m = mn;
    // O^T columns are heads 2 tq, 2 tq + 1: their corr sits in quads 2 tq and 2 tq + 1.
    const float c0 = __shfl_sync(0xffffffffu, corr, 8 * tq), c1 = __shfl_sync(0xffffffffu, corr, 8 * tq + 4);
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      o[j][0] *= c0;
      o[j][1] *= c1;
      o[j][2] *= c0;
      o[j][3] *= c1;
    }
    // P^T as B: b0 = (keys 2 tq, +1; head gq) = s[0][0..1], b1 = keys + 8 = s[1][0..1].
    uint32_t pb0[2], pb1[2];
    mma::split_pair<2>(s[0][0], s[0][1], pb0);
    mma::split_pair<2>(s[1][0], s[1][1], pb1);
    // O^T += V^T P^T: ldmatrix.trans matrix q = lane / 8 holds keys (q >> 1) * 8 .. + 7 and
    // features 16 mt + (q & 1) * 8 .. + 7: a0 a1 a2 a3 of m-tile mt.
    const int vr = (lane & 7) + ((lane >> 4) << 3), vc0 = (lane >> 3) & 1;
#pragma unroll
    for (int j = 0; j < MT; ++j) {
      uint32_t av[4];
      ldmatrix_x4_trans(av, smem_addr(vs_ + swz<D>(vr, 2 * j + vc0)));
      mma_bf16(o[j], av, pb0[0], pb1[0]);
      mma_bf16(o[j], av, pb0[1], pb1[1]);
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
  }
  cp_async_wait<0>();

  // Merge the warps: [W][G][D] o, then [W][G] m, [W][G] l, over the (now idle) rings.
  __syncthreads();
  float* so = reinterpret_cast<float*>(smem_raw);
  float* smx = so + kWarps * G * D;
  float* sl = smx + kWarps * G;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int hh = 2 * tq + c;
    if (hh < G) {
#pragma unroll
      for (int j = 0; j < MT; ++j) {
        so[(warp * G + hh) * D + 16 * j + gq] = o[j][c];
        so[(warp * G + hh) * D + 16 * j + gq + 8] = o[j][2 + c];
      }
    }
  }
  if (tq == 0 && gq < G) {
    smx[warp * G + gq] = m;
    sl[warp * G + gq] = l;
  }
  __syncthreads();
  attn_detail::combine_warps<kWarps>(p, so, smx, sl, G, D, b, h0, splits, z);
}

template <int D>
cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
  constexpr size_t bytes = DecCfg<D>::kSmem;
  auto* kernel = attn_decode_mma_kernel<D>;
  if (const cudaError_t err = dev::allow_dynamic_smem(kernel, bytes); err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(p.Hkv), static_cast<unsigned>(p.T), static_cast<unsigned>(p.splits));
  launch_kernel(kernel, grid, kThreads, bytes, stream, p, p.Hq / p.Hkv, attention_scale(D));
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess) return err;
  if (p.splits > 1) attn_detail::launch_decode_merge(p, stream);
  return cudaGetLastError();
}

}  // namespace

cudaError_t attention_decode_mma(const AttentionParams& p, cudaStream_t stream) {
  LaunchCheck c("attention_decode_mma");
  attn_detail::check_common(c, p);
  c.require(attention_decode_mma_supports(p.Hq, p.Hkv, p.D, p.q_dtype, p.cache_dtype),
            "needs bf16 q and caches, Hq / Hkv <= 8 and a head dim with a built tile (64, 128, 256)");
  c.in_range(p.splits, 1, 1024, "splits").require(p.splits == 1 || p.workspace, "splits > 1 needs a workspace");
  c.in_range(p.T, 0, 65535, "T").in_range(p.Hq, 1, 65535, "Hq");
  attn_detail::check_mma(c, p);
  if (!c.ok()) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  switch (p.D) {
    case 64: return launch<64>(p, stream);
    case 128: return launch<128>(p, stream);
    case 256: return launch<256>(p, stream);
    default: c.require(false, "D must be 64, 128 or 256"); return cudaErrorInvalidValue;
  }
}

}  // namespace sg
