// attention_prefill_wgmma.cu: the varlen causal prefill (attention_prefill_wgmma.h) on the sm_90a
// warpgroup tensor cores, for a bf16 cache and bf16 q / gate, D in {64, 128, 256}. Built for
// sm_90a only (the sg_kernels_sm90a library).
//
// Why: the mma.sync kernel (attention_prefill_mma.cu) has each of its 4 warps read the whole K and
// V tile from shared memory through registers for its 16 rows, and the q fragments again for
// every key tile. Here one warpgroup (4 warps, 128 threads) computes the same 64-row tile with
// wgmma, which reads q, K and V from shared memory once for all 64 rows, without register copies.
// Measured on the H200 (docs/BENCHMARKS.md): only 1% faster than the mma kernel at the 4B's
// prefill, so those reads were not what held it; both wait on each block's chain of copy, S,
// softmax and P V.
//
// Block (query tile of 64 rows, q head h); dynamic shared memory: the q tile [64 x D], one K and
// one V tile [64 keys x D] (bf16, unswizzled core-matrix layout of wgmma_util.cuh: chunk (row r,
// 16-byte column c) at (r / 8) D 16 + c 128 + (r % 8) 16, which thread i's 16-byte cp.async writes
// at byte 16 i) and the tile's slots and positions: attention_prefill_wgmma_smem(D) bytes (98,816
// at D = 256). The slot passes, their keys and the f32 softmax are the mma kernel's
// (attention_prefill_tile.cuh). Per key tile of 64 keys:
//   S [64 x 64] = q K^T         D / 16 wgmma m64n64k16, q and K from shared memory (K-major)
//   online softmax per row      online_softmax: exactly the mma kernel's f32 steps
//   O [64 x D] += P V            P split P = P_hi + P_lo in registers (the A operand), V from shared
//                                memory (MN-major): per 16-key step, P_hi then P_lo, D / 128 (or one
//                                m64n64 at D = 64) wgmma each
// then out = (O / l) * sigmoid(gate) after each pass, zeros for padding rows, rows >= T untouched.
// Every row of the warpgroup takes part in every product (no per-warp skipping): rows outside the
// pass score -inf and get p = 0; what that adds to their accumulators (0 * V) is cleared at their
// own pass, so sequences stay isolated exactly as in the mma kernel (its header states the rule).
//
// Arithmetic: S and P V are bf16 x bf16 products accumulated in f32 by the tensor cores in k-step
// order, P split in two bf16 parts: the error bound derived in attention_prefill_mma.cu holds
// unchanged. At D 64 and 128 the bytes are the mma kernel's (the same 64-key tiles; seen on the
// H200 and asserted by the tests, though the two instruction families' accumulation orders are not
// documented to agree); at D = 256, where the mma kernel takes 32-key tiles, the softmax rescales at
// other keys: a setting, tested against the same reference and tolerance.
// Grid (ceil(T / 64), Hq) from the shape only; no allocation, no host synchronisation.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/attention_internal.cuh"
#include "kernels/attention_prefill_tile.cuh"
#include "kernels/attention_prefill_wgmma.h"
#include "kernels/attention_shapes.h"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"
#include "kernels/wgmma_util.cuh"

namespace sg {
namespace {

using namespace attn_detail;
using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::smem_addr;

constexpr int kThreads = 128;  // one warpgroup
constexpr int kBQ = kPrefillTileRows;
constexpr int kBK = 64;    // keys per K/V tile
constexpr int kParts = 2;  // bf16 parts of P in P V

template <int D>
struct WgCfg {
  static constexpr int CHUNKS = D / 8;                // 16-byte chunks per row
  static constexpr uint32_t kGroup = D * 16;          // bytes between row groups of 8
  static constexpr uint32_t kTile = 64 * D * 2;       // bytes of a 64-row tile
  static constexpr int NT_S = kBK / 8, NT_O = D / 8;  // accumulator n-tiles of S and O
  static constexpr int NC = D < 128 ? D : 128;        // features a P V instruction covers
  static constexpr size_t kSmem = 3 * size_t{kTile} + 2 * kBQ * sizeof(int);
  static_assert(D == 64 || D == 128 || D == 256, "D must be 64, 128 or 256");
};

// Copies a 64-row tile (rows `row(r)` of `src`, r < n; zeros for r >= n) into the core-matrix
// layout at `dst`: thread i's chunk lands at byte 16 i (row (i / 8 / CHUNKS) * 8 + i % 8, column
// (i / 8) % CHUNKS), so a warp's stores fill 512 contiguous bytes.
template <int D, typename RowPtr>
__device__ __forceinline__ void load_tile(uint32_t dst, int n, RowPtr row) {
  constexpr int CHUNKS = WgCfg<D>::CHUNKS;
  for (int i = threadIdx.x; i < 64 * CHUNKS; i += kThreads) {
    const int c = (i >> 3) % CHUNKS, r = ((i >> 3) / CHUNKS) * 8 + (i & 7);
    const bool in = r < n;
    cp_async16(dst + 16 * i, in ? row(r) + c * 8 : row(0), in);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads, 2)
    attn_prefill_wgmma_kernel(const AttentionParams p, int group, float scale) {
  pdl_start();  // kernels/launch.cuh
  using Cfg = WgCfg<D>;
  constexpr int NT_S = Cfg::NT_S, NT_O = Cfg::NT_O, NC = Cfg::NC;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const uint32_t q_s = smem_addr(smem_raw);                         // [64 x D] core matrices
  const uint32_t k_s = q_s + Cfg::kTile;                            // [64 keys x D]
  const uint32_t v_s = k_s + Cfg::kTile;                            // [64 keys x D]
  int* q_slot = reinterpret_cast<int*>(smem_raw + 3 * Cfg::kTile);  // [64]
  int* q_pos = q_slot + kBQ;                                        // [64]

  const int tile = blockIdx.x, h = blockIdx.y, g = h / group;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int row0 = warp * 16 + (lane >> 2), tq = lane & 3;
  const auto* q = static_cast<const __nv_bfloat16*>(p.q);         // [T, Hq, D]
  const auto* kc = static_cast<const __nv_bfloat16*>(p.k_cache);  // [num_slots, max_context, Hkv, D]
  const auto* vc = static_cast<const __nv_bfloat16*>(p.v_cache);  // [num_slots, max_context, Hkv, D]

  load_tile_rows(p, tile, kBQ, q_slot, q_pos);
  const int q_rows = min(kBQ, p.T - tile * kBQ);
  load_tile<D>(q_s, q_rows, [&](int r) { return q + (static_cast<int64_t>(tile * kBQ + r) * p.Hq + h) * D; });
  cp_async_commit();
  __syncthreads();  // q_slot, q_pos

  float o[NT_O][4];
#pragma unroll
  for (int j = 0; j < NT_O; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  uint64_t remaining = live_rows(q_slot);
  const int64_t pos_stride = static_cast<int64_t>(p.Hkv) * D;

  while (remaining) {  // block-uniform
    const auto [slot, active, kmax] = next_pass(q_slot, q_pos, remaining);
    int lim[2];
    begin_pass(o, m, l, lim, active, q_pos, row0);
    const int64_t base = (static_cast<int64_t>(slot) * p.max_context * p.Hkv + g) * D;

    for (int kt = 0; kt < kmax; kt += kBK) {
      const int nk = min(kBK, kmax - kt);
      __syncthreads();  // every wgmma of the previous tile has completed (each thread waited)
      load_tile<D>(k_s, nk, [&](int r) { return kc + base + (kt + r) * pos_stride; });
      cp_async_commit();
      load_tile<D>(v_s, nk, [&](int r) { return vc + base + (kt + r) * pos_stride; });
      cp_async_commit();
      cp_async_wait<1>();  // q and K
      wgmma::fence_proxy_async();
      __syncthreads();

      float s[NT_S][4];
#pragma unroll
      for (int j = 0; j < NT_S; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        // K-major q and K: a 16-element k-step is two core matrices along K, 256 bytes on.
        wgmma::m64n64k16_ss(&s[0][0], wgmma::desc(q_s + 256 * kk, 128, Cfg::kGroup),
                            wgmma::desc(k_s + 256 * kk, 128, Cfg::kGroup), kk > 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands<NT_S * 4>(&s[0][0]);
      online_softmax(s, o, m, l, lim, kt, tq, scale);

      uint32_t a[kBK / 16][kParts][4];
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) p_fragments<kParts>(s, kk, a[kk]);
      cp_async_wait<0>();  // V
      wgmma::fence_proxy_async();
      __syncthreads();
      wgmma::fence_operands<NT_O * 4>(&o[0][0]);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
#pragma unroll
        for (int i = 0; i < kParts; ++i) {
#pragma unroll
          for (int c = 0; c < D / NC; ++c) {
            // MN-major V: a 16-key step is two row groups (2 D 16 bytes); NC features are NC / 8
            // core matrices along N, 128 bytes apart.
            const uint64_t b = wgmma::desc(v_s + 2 * Cfg::kGroup * kk + c * (NC / 8) * 128, Cfg::kGroup, 128);
            if constexpr (NC == 128) {
              wgmma::m64n128k16_rs_tb(&o[c * 16][0], a[kk][i], b);
            } else {
              wgmma::m64n64k16_rs_tb(&o[c * 8][0], a[kk][i], b);
            }
          }
        }
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands<NT_O * 4>(&o[0][0]);
    }
    store_pass_rows<D>(p, o, l, active, tile, h, row0, tq);
  }

  cp_async_wait<0>();  // a tile without live rows never waited for its q copies
  zero_padding_rows<D>(p, q_slot, tile, h, row0, tq);
}

template <int D>
cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
  static_assert(WgCfg<D>::kSmem == attention_prefill_wgmma_smem(D), "the bytes the model plans with");
  return launch_prefill_tiles(attn_prefill_wgmma_kernel<D>, kThreads, WgCfg<D>::kSmem, p, stream);
}

}  // namespace

cudaError_t attention_prefill_wgmma(const AttentionParams& p, cudaStream_t stream) {
  LaunchCheck c("attention_prefill_wgmma");
  if (!check_prefill_tiles(c, p, attention_prefill_wgmma_supports(p.D, p.q_dtype, p.cache_dtype),
                           "needs bf16 q and caches and a head dim of 64, 128 or 256")) {
    return cudaErrorInvalidValue;
  }
  // Built for sm_90a alone: any other device has no image of the kernel.
  if (const cudaError_t err = dev::require_sm90a(c); err != cudaSuccess) return err;
  if (p.T == 0) return cudaSuccess;
  switch (p.D) {
    case 64: return launch<64>(p, stream);
    case 128: return launch<128>(p, stream);
    case 256: return launch<256>(p, stream);
    default: c.require(false, "D must be 64, 128 or 256"); return cudaErrorInvalidValue;
  }
}

}  // namespace sg
