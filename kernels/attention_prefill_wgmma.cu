// attention_prefill_wgmma.cu: the varlen causal prefill (attention_prefill_wgmma.h) on the sm_90a
// warpgroup tensor cores, for a bf16 cache and bf16 q / gate, D in {64, 128, 256}. Built for
// sm_90a only (the sg_kernels_sm90a library).
//
// Block (query tile of 64 rows, NH query heads that share one kv head: NH = 2 when Hq / Hkv is
// even, else 1): warpgroup 0 produces, warpgroups 1 .. NH consume, one query head each.
//   producer  one thread: the NH query tiles, then every key tile of every slot pass of the tile,
//             K and V by TMA (tma_map.h; boxes of 64 keys x 64 features, 128-byte swizzle) into a
//             ring of two stages, each stage's K and V on their own "full" mbarriers, refilled when
//             every consumer warp has arrived on its "empty" one.
//   consumers the 64-row tile of their head against the shared K / V tiles:
//     S [64 x 64] = q K^T     D / 16 wgmma m64n64k16, q and K from shared memory (K-major)
//     online softmax          online_softmax: exactly the mma kernel's f32 steps
//     O [64 x D] += P V       P split P = P_hi + P_lo in registers (the A operand), V from shared
//                             memory (MN-major): per 16-key step, P_hi then P_lo, D / 128 (or one
//                             m64n64 at D = 64) wgmma each
//   then out = (O / l) * sigmoid(gate) after each pass, zeros for padding rows, rows >= T untouched.
//   With two consumers, they take turns to issue their products (wgmma::Turns: S of one, S of the
//   other, then P V of one, P V of the other), so that each one's softmax runs under the other's
//   products instead of both waiting on the tensor cores at once; the order of the products within
//   a consumer, and so every byte, is unchanged.
// So a K / V tile is read from memory once for NH heads, its copy runs while the previous tile's
// products do, and it arrives by one instruction a box into the swizzled layout wgmma reads
// without bank conflicts (the former form of this kernel: each 64-row tile alone, its copies by
// 16-byte cp.async into an unswizzled layout, issued and waited for before each tile's products).
// A tile's keys past the pass's last are whatever the cache holds there (the copy reads whole
// boxes; past max_context it fills zeros): their scores are masked to -inf before use, and their
// V rows are zeroed in shared memory before P V reads them (0 * a stale NaN would be NaN).
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
// Grid (ceil(T / 64), Hq / NH) from the shape only; no allocation, no host synchronisation.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/attention_internal.cuh"
#include "kernels/attention_prefill_tile.cuh"
#include "kernels/attention_prefill_wgmma.h"
#include "kernels/attention_shapes.h"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"
#include "kernels/tma_map.h"
#include "kernels/tma_util.cuh"
#include "kernels/wgmma_util.cuh"

namespace sg {
namespace {

using namespace attn_detail;
using mma::smem_addr;

constexpr int kBQ = kPrefillTileRows;
constexpr int kBK = 64;                // keys per K/V tile
constexpr int kParts = 2;              // bf16 parts of P in P V
constexpr int kStages = 2;             // K/V ring
constexpr uint32_t kPanel = 64 * 128;  // bytes of a swizzled box: 64 rows x 64 bf16
constexpr int kProducerRegs = 24;      // setmaxnreg with two consumer warpgroups: 24 + 2 x 240 =
constexpr int kConsumerRegs = 240;     // 3 x 168, the launch bound's share of the register file

template <int D, int NH>
struct WgCfg {
  static constexpr int kPanels = D / 64;               // boxes a 64-row tile
  static constexpr uint32_t kTile = kPanels * kPanel;  // bytes of a 64-row tile
  static constexpr int NT_S = kBK / 8, NT_O = D / 8;   // accumulator n-tiles of S and O
  static constexpr int NC = D < 128 ? D : 128;         // features a P V instruction covers
  static constexpr int kThreads = 128 * (1 + NH);
  static constexpr uint32_t kKV = NH * kTile;  // the ring after the NH query tiles
  static constexpr size_t kSmem = size_t{kKV} + 2 * kStages * size_t{kTile} + 1024;  // + alignment
  static_assert(D == 64 || D == 128 || D == 256, "D must be 64, 128 or 256");
  static_assert(NH == 1 || NH == 2, "one or two query heads a block");
};

// Zeros rows `from` .. 63 of the V tile at `v` (every box): the keys past the pass's last.
template <int D, int NH>
__device__ __forceinline__ void zero_tail_rows(uint32_t v, int from, int ctid) {
  constexpr int kChunks = 8 * WgCfg<D, NH>::kPanels;  // 16-byte chunks a row (all boxes)
  for (int i = ctid; i < (kBK - from) * kChunks; i += 128 * NH) {
    const int r = from + i / kChunks, c = i % kChunks;
    const uint32_t a = v + (c >> 3) * kPanel + r * 128 + (c & 7) * 16;
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(a), "r"(0) : "memory");
  }
}

// The consumer warpgroups' barrier (named barrier 1; 0 is __syncthreads).
template <int NH>
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(128 * NH) : "memory");
}

template <int D, int NH>
__global__ void __launch_bounds__(WgCfg<D, NH>::kThreads, 1)
    attn_prefill_wgmma_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                              const __grid_constant__ CUtensorMap v_map, const AttentionParams p, int group,
                              float scale) {
  using Cfg = WgCfg<D, NH>;
  constexpr int NT_S = Cfg::NT_S, NT_O = Cfg::NT_O, NC = Cfg::NC, kPanels = Cfg::kPanels;
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t q_full, k_full[kStages], v_full[kStages], empty[kStages];
  __shared__ int q_slot[kBQ], q_pos[kBQ];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t q_base = (raw + 1023) & ~1023u;                         // [NH][64 rows x D] swizzled boxes
  const uint32_t kv_base = q_base + Cfg::kKV;                            // the ring after the query tiles
  auto stage_k = [&](int st) { return kv_base + 2 * st * Cfg::kTile; };  // stage st's K tile; its V a tile on
  const int tile = blockIdx.x, h0 = blockIdx.y * NH, g = h0 / group;
  const int tid = threadIdx.x, wg = tid >> 7;
  if (tid == 0) {
    tma::mbar_init(smem_addr(&q_full), 1);
    for (int i = 0; i < kStages; ++i) {
      tma::mbar_init(smem_addr(&k_full[i]), 1);
      tma::mbar_init(smem_addr(&v_full[i]), 1);
      tma::mbar_init(smem_addr(&empty[i]), 4 * NH);  // every consumer warp
    }
    tma::mbar_fence_init();
  }
  pdl_start();  // kernels/launch.cuh: q, K and V are the previous kernel's
  load_tile_rows(p, tile, kBQ, q_slot, q_pos);
  __syncthreads();  // barriers, q_slot, q_pos

  if (wg == 0) {  // the producer
    if constexpr (NH == 2) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegs));
    if (tid != 0) return;
    tma::mbar_arrive_expect_tx(smem_addr(&q_full), NH * Cfg::kTile);
    for (int c = 0; c < NH; ++c) {
      for (int b = 0; b < kPanels; ++b) {
        tma::load_3d(q_base + c * Cfg::kTile + b * kPanel, &q_map, 64 * b, h0 + c, tile * kBQ, smem_addr(&q_full));
      }
    }
    uint64_t remaining = live_rows(q_slot);
    int it = 0;  // key tiles issued, over all passes
    while (remaining) {
      const auto [slot, active, kmax] = next_pass(q_slot, q_pos, remaining);
      for (int kt = 0; kt < kmax; kt += kBK, ++it) {
        const int st = it % kStages, use = it / kStages;
        if (use > 0) {
          tma::mbar_wait(smem_addr(&empty[st]), (use - 1) & 1);
          tma::release_reads();  // the consumers' reads (and V zeroing) of the stage before its refill
        }
        const uint32_t ks = stage_k(st), vs = ks + Cfg::kTile;
        tma::mbar_arrive_expect_tx(smem_addr(&k_full[st]), Cfg::kTile);
        for (int b = 0; b < kPanels; ++b)
          tma::load_4d(ks + b * kPanel, &k_map, 64 * b, g, kt, slot, smem_addr(&k_full[st]));
        tma::mbar_arrive_expect_tx(smem_addr(&v_full[st]), Cfg::kTile);
        for (int b = 0; b < kPanels; ++b)
          tma::load_4d(vs + b * kPanel, &v_map, 64 * b, g, kt, slot, smem_addr(&v_full[st]));
      }
    }
    return;
  }

  if constexpr (NH == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegs));
  const int c = wg - 1, h = h0 + c, ctid = tid - 128;
  const int warp = (tid >> 5) & 3, lane = tid & 31;
  const int row0 = warp * 16 + (lane >> 2), tq = lane & 3;
  const uint32_t q_s = q_base + c * Cfg::kTile;

  float o[NT_O][4];
#pragma unroll
  for (int j = 0; j < NT_O; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.0f, 0.0f};
  uint64_t remaining = live_rows(q_slot);
  tma::mbar_wait(smem_addr(&q_full), 0);  // also when no row is live: the copies must land before the block ends
  int it = 0;
  // With two consumers, their S and P V products alternate on the tensor cores (named barriers 2
  // and 3), so that one's softmax runs under the other's products.
  const wgmma::Turns<2> turns{c};
  if (NH == 2 && c == 1) turns.pass();  // consumer 0 issues first

  while (remaining) {  // block-uniform
    const auto [slot, active, kmax] = next_pass(q_slot, q_pos, remaining);
    int lim[2];
    begin_pass(o, m, l, lim, active, q_pos, row0);

    for (int kt = 0; kt < kmax; kt += kBK, ++it) {
      const int st = it % kStages, nk = min(kBK, kmax - kt);
      const uint32_t parity = (it / kStages) & 1;
      const uint32_t ks = stage_k(st), vs = ks + Cfg::kTile;
      tma::mbar_wait(smem_addr(&k_full[st]), parity);

      float s[NT_S][4];
#pragma unroll
      for (int j = 0; j < NT_S; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      if constexpr (NH == 2) turns.wait();
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        // K-major q and K: k-step kk is 32 bytes into the rows of box kk / 4.
        const uint32_t off = (kk >> 2) * kPanel + (kk & 3) * 32;
        wgmma::m64n64k16_ss(&s[0][0], wgmma::desc_sw128(q_s + off, 16, 1024), wgmma::desc_sw128(ks + off, 16, 1024),
                            kk > 0);
      }
      wgmma::commit();
      if constexpr (NH == 2) turns.pass();
      wgmma::wait<0>();
      wgmma::fence_operands<NT_S * 4>(&s[0][0]);
      online_softmax(s, o, m, l, lim, kt, tq, scale);

      uint32_t a[kBK / 16][kParts][4];
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) p_fragments<kParts>(s, kk, a[kk]);
      tma::mbar_wait(smem_addr(&v_full[st]), parity);
      if (nk < kBK) {  // block-uniform: the pass's last tile
        zero_tail_rows<D, NH>(vs, nk, ctid);
        wgmma::fence_proxy_async();
        consumers_sync<NH>();
      }
      wgmma::fence_operands<NT_O * 4>(&o[0][0]);
      if constexpr (NH == 2) turns.wait();
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
#pragma unroll
        for (int i = 0; i < kParts; ++i) {
#pragma unroll
          for (int cc = 0; cc < D / NC; ++cc) {
            // MN-major V: a 16-key step is 16 rows (2048 bytes) on; NC features are NC / 64 boxes.
            const uint64_t b = wgmma::desc_sw128(vs + cc * (NC / 64) * kPanel + kk * 16 * 128, kPanel, 1024);
            if constexpr (NC == 128) {
              wgmma::m64n128k16_rs_tb(&o[cc * 16][0], a[kk][i], b);
            } else {
              wgmma::m64n64k16_rs_tb(&o[cc * 8][0], a[kk][i], b);
            }
          }
        }
      }
      wgmma::commit();
      if constexpr (NH == 2) turns.pass();
      wgmma::wait<0>();
      wgmma::fence_operands<NT_O * 4>(&o[0][0]);
      __syncwarp();
      if (lane == 0) tma::mbar_arrive(smem_addr(&empty[st]));  // this warp is done with the stage
    }
    store_pass_rows<D>(p, o, l, active, tile, h, row0, tq);
  }
  if (NH == 2 && c == 0) turns.wait();  // consumer 1's last pass
  zero_padding_rows<D>(p, q_slot, tile, h, row0, tq);
}

// The tensor maps: q [T, Hq, D] in boxes of 64 features x 1 head x 64 rows; a cache [slots,
// max_context, Hkv, D] in boxes of 64 features x 1 head x 64 positions x 1 slot. The slot count is
// not a parameter: the bound is the largest the copy engine takes (slots come from the step's
// metadata, which the model validates; past max_context the boxes fill zeros).
bool make_maps(const AttentionParams& p, CUtensorMap& q_map, CUtensorMap& k_map, CUtensorMap& v_map) {
  const cuuint64_t D = static_cast<cuuint64_t>(p.D), Hq = static_cast<cuuint64_t>(p.Hq);
  const cuuint64_t Hkv = static_cast<cuuint64_t>(p.Hkv), ctx = static_cast<cuuint64_t>(p.max_context);
  const cuuint64_t q_dims[3] = {D, Hq, static_cast<cuuint64_t>(p.T)};
  const cuuint64_t q_strides[2] = {D * 2, Hq * D * 2};
  const cuuint32_t q_box[3] = {64, 1, static_cast<cuuint32_t>(kBQ)};
  const cuuint64_t slot_bytes = ctx * Hkv * D * 2;
  const cuuint64_t slots = std::clamp<cuuint64_t>((cuuint64_t{1} << 47) / slot_bytes, 1, cuuint64_t{1} << 31);
  const cuuint64_t c_dims[4] = {D, Hkv, ctx, slots};
  const cuuint64_t c_strides[3] = {D * 2, Hkv * D * 2, slot_bytes};
  const cuuint32_t c_box[4] = {64, 1, static_cast<cuuint32_t>(kBK), 1};
  return tma::encode_bf16_sw128(&q_map, p.q, 3, q_dims, q_strides, q_box) &&
         tma::encode_bf16_sw128(&k_map, p.k_cache, 4, c_dims, c_strides, c_box) &&
         tma::encode_bf16_sw128(&v_map, p.v_cache, 4, c_dims, c_strides, c_box);
}

template <int D, int NH>
cudaError_t launch(const AttentionParams& p, cudaStream_t stream) {
  using Cfg = WgCfg<D, NH>;
  static_assert(Cfg::kSmem <= attention_prefill_wgmma_smem(D), "the bytes the model plans with");
  CUtensorMap q_map, k_map, v_map;
  if (!make_maps(p, q_map, k_map, v_map)) return cudaErrorNotSupported;
  auto* kernel = attn_prefill_wgmma_kernel<D, NH>;
  if (const cudaError_t err = dev::allow_dynamic_smem(kernel, Cfg::kSmem); err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((p.T + kBQ - 1) / kBQ), static_cast<unsigned>(p.Hq / NH));
  launch_kernel(kernel, grid, Cfg::kThreads, Cfg::kSmem, stream, q_map, k_map, v_map, p, p.Hq / p.Hkv,
                attention_scale(p.D));
  return cudaGetLastError();
}

template <int D>
cudaError_t launch_heads(const AttentionParams& p, cudaStream_t stream) {
  return (p.Hq / p.Hkv) % 2 == 0 ? launch<D, 2>(p, stream) : launch<D, 1>(p, stream);
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
    case 64: return launch_heads<64>(p, stream);
    case 128: return launch_heads<128>(p, stream);
    case 256: return launch_heads<256>(p, stream);
    default: c.require(false, "D must be 64, 128 or 256"); return cudaErrorInvalidValue;
  }
}

}  // namespace sg
