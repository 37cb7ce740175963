// skinny_gemm.cu: y = x W^T for M <= 32 rows on the tensor cores (skinny_gemm.h).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/mma_util.cuh"
#include "kernels/skinny_gemm.h"
#include "kernels/tma_map.h"
#include "kernels/tma_util.cuh"

// A delay at the kernel's synchronisation points (site, a warp-uniform index, the lanes that reach
// it): tools/probes/skinny_jitter_probe.cu includes this file with it defined to a random wait, so
// that a race between the ring's copies and their readers, or in the split-K sum, shows as changed
// bytes. Nothing in the library.
#ifndef SG_SKINNY_JITTER
#define SG_SKINNY_JITTER(site, index, lanes) \
  do {                                       \
  } while (0)
#endif

namespace sg {
namespace {

using mma::ldmatrix_x4;
using mma::mma_bf16;
using mma::smem_addr;

constexpr int kBN = kSkinnyGemmNarrowRows;  // W rows per block: 16 per consumer warp
constexpr int kBK = kSkinnyGemmTileK;       // K per tile: one 128-byte swizzle row of bf16
constexpr int kStages = 8;                  // ring depth; two blocks fit an SM
// Weight tiles requested before pdl_wait above 24 rows (S at most 24 rows): the previous kernel's
// loads queue behind them. 4B decode b=32 against cuBLASLt: 1 tile +0.2%, 3 tiles -1.2%, all
// (5 or 8) neutral (docs/BENCHMARKS.md).
constexpr int kEarlyTilesWide = 3;

// W rows a tensor-map box for BN rows a block: a box holds at most 256 rows, so wider blocks copy
// two halves (each a multiple of 8 rows, so the second starts on a 1024-byte boundary).
__host__ __device__ constexpr int w_box_rows(int bn) { return bn > 256 ? bn / 2 : bn; }

// Offset (bf16 elements) of 16-byte chunk c of row r in a tile of 64-wide rows: the TMA's 128-byte
// swizzle (chunk c ^ (r % 8)), so the 8 rows an ldmatrix reads fall on different banks. A tile
// must start on a 1024-byte boundary for the pattern to line up.
__device__ __forceinline__ int swz(int r, int c) { return r * kBK + ((c ^ (r & 7)) << 3); }

// y[token, n] = v (bf16 rounded to nearest, or f32).
template <bool kF32Out>
__device__ __forceinline__ void store_y(const SkinnyGemmParams& p, int token, int n, float v) {
  const int64_t ldy = p.ldy ? p.ldy : p.N;
  if constexpr (kF32Out) {
    static_cast<float*>(p.y)[token * ldy + n] = v;
  } else {
    static_cast<__nv_bfloat16*>(p.y)[token * ldy + n] = __float2bfloat16_rn(v);
  }
}

// The SwiGLU epilogue's store (swiglu_group = 8): gate and up of W rows n and n + 8 (n % 16 < 8)
// of one token, rounded to bf16 as the GEMM's y would be, give act[token, 8 (n / 16) + n % 8] with
// the swiglu kernel's bytes; tokens at or past *live_rows get zeros (as the swiglu kernel writes).
__device__ __forceinline__ void store_act(const SkinnyGemmParams& p, int token, int n, float gate, float up, int live) {
  const int64_t ldy = p.ldy ? p.ldy : p.N / 2;
  const float g = __bfloat162float(__float2bfloat16_rn(gate)), u = __bfloat162float(__float2bfloat16_rn(up));
  const float v = token < live ? dev::swiglu_value(g, u, p.act_dtype == DType::bf16) : 0.0f;
  static_cast<__nv_bfloat16*>(p.y)[token * ldy + (n >> 4) * 8 + (n & 7)] = __float2bfloat16_rn(v);
}

// The last block of a row block (W rows n0 .. n0 + BN) sums the split partials, in split order
// from 0.0f, and stores y. Four adjacent outputs a thread and up to 8 partial loads in flight: the
// sum is a chain of L2 round trips otherwise (M = 32: ~13 outputs x splits loads a thread, one
// after another, which cost more than the GEMM at N = 2560).
template <int BN, bool kF32Out>
__device__ void sum_splits(const SkinnyGemmParams& p, int n0, int splits, int tid, int nthreads, int live) {
  const int64_t plane = static_cast<int64_t>(p.M) * p.N;  // one split's partial [M, N]
  const bool vec = p.N % 4 == 0;                          // then every group of 4 starts 16-byte aligned
  const bool swiglu = p.swiglu_group != 0;                // N % 16 == 0: a gate quad's up quad is 8 rows on
  // The sum of quad n (4 adjacent outputs of one token) into v, 8 partial loads in flight.
  auto sum_quad = [&](const float* src, int n, float(&v)[4]) {
    v[0] = v[1] = v[2] = v[3] = 0.0f;
    if (vec) {
      for (int k0 = 0; k0 < splits; k0 += 8) {
        float4 t[8];
#pragma unroll
        for (int j = 0; j < 8; ++j)
          if (k0 + j < splits) t[j] = __ldcg(reinterpret_cast<const float4*>(src + (k0 + j) * plane));
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (k0 + j < splits) {
            v[0] += t[j].x;
            v[1] += t[j].y;
            v[2] += t[j].z;
            v[3] += t[j].w;
          }
        }
      }
    } else {
      for (int e = 0; e < 4 && n + e < p.N; ++e)
        for (int k = 0; k < splits; ++k) v[e] += __ldcg(src + k * plane + e);
    }
  };
  for (int idx = tid; idx < p.M * (BN / 4); idx += nthreads) {
    const int token = idx / (BN / 4), n = n0 + (idx % (BN / 4)) * 4;
    if (n >= p.N || (swiglu && (n & 8))) continue;  // (an up quad: summed with its gate quad)
    const float* src = p.workspace + static_cast<int64_t>(token) * p.N + n;
    float v[4];
    sum_quad(src, n, v);
    if (swiglu) {
      float u[4];
      sum_quad(src + 8, n + 8, u);
      for (int e = 0; e < 4; ++e) store_act(p, token, n + e, v[e], u[e], live);
    } else {
      for (int e = 0; e < 4 && n + e < p.N; ++e) store_y<kF32Out>(p, token, n + e, v[e]);
    }
  }
}

// A block's end, shared by the producer/consumer kernels (warp 0 produces, consumer warp w = warp - 1
// holds acc for W rows n0 + 16 w ..): one split stores y; with splits > 1 it writes its f32 partial
// [M, BN] to the workspace and the row block's last block to finish (a per-row-block counter, left
// at zero) sums the partials in split order. Every thread of the block calls it.
template <int BN, int NT, bool kF32Out>
__device__ void finish_block(const SkinnyGemmParams& p, const float (&acc)[NT][4], int n0, int rb, int s, int warp,
                             int lane, int live) {
  const int splits = gridDim.y, tid = threadIdx.x, g = lane >> 2, tq = lane & 3, cw = warp - 1;
  // acc[j]: c0 c1 = (W row 16 cw + g, tokens 8 j + 2 tq, + 1), c2 c3 = (row + 8, same tokens).
  if (splits == 1 && p.swiglu_group != 0) {
    if (warp == 0) return;
      // Row g of the warp's 16 is gate (c0 c1), row g + 8 its up (c2 c3): W rows interleave in 8s.
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int token = 8 * j + 2 * tq + e, n = n0 + cw * 16 + g;
        if (token < p.M && n < p.N) store_act(p, token, n, acc[j][e], acc[j][e + 2], live);
      }
    }
    return;
  }
  if (splits == 1) {
    if (warp == 0) return;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int token = 8 * j + 2 * tq + (e & 1), n = n0 + cw * 16 + g + (e >> 1) * 8;
        if (token < p.M && n < p.N) store_y<kF32Out>(p, token, n, acc[j][e]);
      }
    }
    return;
  }
  float* part = p.workspace + static_cast<int64_t>(s) * p.M * p.N;
  if (warp > 0) {
    SG_SKINNY_JITTER(5, s, 0xffffffffu);
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int token = 8 * j + 2 * tq + (e & 1), n = n0 + cw * 16 + g + (e >> 1) * 8;
        if (token < p.M && n < p.N) part[static_cast<int64_t>(token) * p.N + n] = acc[j][e];
      }
    }
  }
  if (p.defer_sum) return;  // the kernel after sums the partials (SkinnyGemmParams::defer_sum)
  __shared__ bool last;
  __threadfence();  // this thread's partial is visible before the count says so
  __syncthreads();
  if (tid == 0) last = atomicAdd(&p.counters[rb], 1) == splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  sum_splits<BN, kF32Out>(p, n0, splits, tid, blockDim.x, live);
  if (tid == 0) p.counters[rb] = 0;  // ready for the next launch
}

// Block = 1 producer warp + BN / 16 consumer warps; grid (ceil(N / BN), splits). Stage st of the
// ring: the W box [BN rows x 64 K] then the x box [8 NT rows x 64 K], both TMA copies that
// complete on full[st]; the consumers free it through empty[st]. No block-wide barrier in the K
// loop: the producer runs up to S tiles ahead of the slowest consumer warp.
template <int BN, int S, int NT, bool kF32Out>
__global__ void __launch_bounds__(32 * (1 + BN / 16))
    skinny_gemm_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                       const SkinnyGemmParams p, int tiles_per_split) {
  constexpr int kStage = (BN + 8 * NT) * kBK;  // bf16 elements a stage: a multiple of 512 (1024 bytes)
  constexpr int kConsumers = BN / 16;
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[S], empty[S];
  const uint32_t raw = smem_addr(smem_raw);
  auto* ring = reinterpret_cast<__nv_bfloat16*>(smem_raw + (((raw + 1023) & ~1023u) - raw));  // 1024-aligned
  const int rb = blockIdx.x, s = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int KT = p.K / kBK;
  const int t0 = s * tiles_per_split, nt = max(0, min(KT, t0 + tiles_per_split) - t0);
  const int n0 = rb * BN;
  if (tid == 0) {
    for (int i = 0; i < S; ++i) {
      tma::mbar_init(smem_addr(&full[i]), 1);
      tma::mbar_init(smem_addr(&empty[i]), kConsumers);
    }
    tma::mbar_fence_init();
  }
  __syncthreads();

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  const int cw = warp - 1;  // consumer warp: W rows 16 cw ..
  if (warp == 0 && lane == 0) {
    // Whole boxes count, zero fill past N and M included. The first S tiles of W (kEarlyTilesWide
    // above 24 rows; weights: no kernel of the step writes them) are requested before pdl_wait, so
    // under PDL the weight stream
    // starts while the previous kernel finishes; x, the previous kernel's output, after it. (The
    // previous kernel's node time grows, as its loads queue behind these, but the step gains:
    // decode b=16 with no tile requested early was 1.8% slower, docs/BENCHMARKS.md.)
    constexpr uint32_t kBytes = static_cast<uint32_t>(BN + 8 * NT) * kBK * 2;
    // The W tile in boxes of kWBox rows (at most 256), each 1024-byte aligned in the stage.
    constexpr int kWBox = w_box_rows(BN);
    auto load_w = [&](__nv_bfloat16* dst, int k0, uint32_t bar) {
#pragma unroll
      for (int b = 0; b < BN / kWBox; ++b)
        tma::load_2d(smem_addr(dst + b * kWBox * kBK), &w_map, k0, n0 + b * kWBox, bar);
    };
    const int first = min(nt, p.M > 24 ? kEarlyTilesWide : S);
    for (int i = 0; i < first; ++i) {
      const uint32_t bar = smem_addr(&full[i]);
      tma::mbar_arrive_expect_tx(bar, kBytes);
      load_w(ring + i * kStage, (t0 + i) * kBK, bar);
    }
    SG_SKINNY_JITTER(1, 0, 1u);
    pdl_start();
    for (int i = 0; i < first; ++i)
      tma::load_2d(smem_addr(ring + i * kStage + BN * kBK), &x_map, (t0 + i) * kBK, 0, smem_addr(&full[i]));
    for (int i = first; i < nt; ++i) {
      const int st = i % S;
      tma::mbar_wait(smem_addr(&empty[st]), ((i / S) - 1) & 1);  // round i / S - 1 consumed
      if (i >= S) tma::release_reads();  // the consumers' ldmatrix reads of it before this refill
      SG_SKINNY_JITTER(2, i, 1u);
      const int k0 = (t0 + i) * kBK;
      __nv_bfloat16* stage = ring + st * kStage;
      const uint32_t bar = smem_addr(&full[st]);
      tma::mbar_arrive_expect_tx(bar, kBytes);
      load_w(stage, k0, bar);
      tma::load_2d(smem_addr(stage + BN * kBK), &x_map, k0, 0, bar);
    }
  } else if (warp == 0) {
    pdl_start();  // the producer's idle lanes (they write split partials in finish_block)
  } else {
    pdl_start();  // consumers: nothing to do before the first full stage, which follows the wait
    // ldmatrix lane roles: A (W rows of this warp): matrix q = lane / 8 holds rows (q & 1) * 8 ..
    // and the k-step's chunk (q >> 1); B (x rows): matrix q holds 8 tokens and chunk q of two k-steps.
    const int a_row = cw * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
    const int b_row = lane & 7, b_chunk = lane >> 3;
    for (int i = 0; i < nt; ++i) {
      const int st = i % S;
      tma::mbar_wait(smem_addr(&full[st]), (i / S) & 1);
      SG_SKINNY_JITTER(3, i, 0xffffffffu);
      const __nv_bfloat16* ws = ring + st * kStage;
      const __nv_bfloat16* xs = ws + BN * kBK;
#pragma unroll
      for (int kp = 0; kp < kBK / 32; ++kp) {  // pairs of k-steps
        if (kp > 0) SG_SKINNY_JITTER(4, i, 0xffffffffu);
        uint32_t a0[4], a1[4];
        ldmatrix_x4(a0, smem_addr(ws + swz(a_row, 4 * kp + a_chunk)));
        ldmatrix_x4(a1, smem_addr(ws + swz(a_row, 4 * kp + 2 + a_chunk)));
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          uint32_t b[4];
          ldmatrix_x4(b, smem_addr(xs + swz(8 * j + b_row, 4 * kp + b_chunk)));
          mma_bf16(acc[j], a0, b[0], b[1]);
          mma_bf16(acc[j], a1, b[2], b[3]);
        }
      }
      __syncwarp();
      if (lane == 0) tma::mbar_arrive(smem_addr(&empty[st]));
    }
  }

  // The SwiGLU epilogue's live token count, read at the block's end: read before the dependency
  // wait instead (step metadata may be), it made the 27B decode steps of up to 8 rows 2-3% slower.
  const int live = p.swiglu_group != 0 && p.live_rows ? *p.live_rows : p.M;
  finish_block<BN, NT, kF32Out>(p, acc, n0, rb, s, warp, lane, live);
}

// A bf16 [rows, cols] matrix with row stride ld elements, boxes of [box_rows x 64], 128-byte swizzle.
bool make_map(CUtensorMap* m, const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(box_rows)};
  return tma::encode_bf16_sw128(m, base, 2, dims, strides, box);
}

template <int BN, int S, int NT, bool kF32Out>
cudaError_t launch_nt(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int KT = p.K / kBK;
  const int tps = (KT + p.splits - 1) / p.splits;
  const dim3 grid(static_cast<unsigned>((p.N + BN - 1) / BN), static_cast<unsigned>(p.splits));
  constexpr size_t smem = static_cast<size_t>(S) * (BN + 8 * NT) * kBK * 2 + 1024;  // + alignment
  CUtensorMap w_map, x_map;
  static_assert(BN % 16 == 0 && BN <= 512 && w_box_rows(BN) % 8 == 0 && BN % w_box_rows(BN) == 0);
  if (!make_map(&w_map, p.W, p.N, p.K, p.K, w_box_rows(BN)) ||
      !make_map(&x_map, p.x, p.M, p.K, p.ldx ? p.ldx : p.K, 8 * NT))
    return cudaErrorNotSupported;
  auto* k = skinny_gemm_kernel<BN, S, NT, kF32Out>;
  if (const cudaError_t e = dev::allow_dynamic_smem(k, smem); e != cudaSuccess) return e;
  launch_kernel(k, grid, 32 * (1 + BN / 16), smem, stream, w_map, x_map, p, tps);
  return cudaGetLastError();
}

template <int BN, int S, int NT>
cudaError_t launch_dtype(const SkinnyGemmParams& p, cudaStream_t stream) {
  return p.y_dtype == DType::f32 ? launch_nt<BN, S, NT, true>(p, stream) : launch_nt<BN, S, NT, false>(p, stream);
}

// BN W rows a block, S stages (skinny_gemm_block_rows picks 64 x 8, 128 x 5 or 256 x 5; the probe
// tries others).
template <int BN, int S>
cudaError_t launch_tma(const SkinnyGemmParams& p, cudaStream_t stream) {
  switch ((p.M + 7) / 8) {
    case 1: return launch_dtype<BN, S, 1>(p, stream);
    case 2: return launch_dtype<BN, S, 2>(p, stream);
    case 3: return launch_dtype<BN, S, 3>(p, stream);
    default: return launch_dtype<BN, S, 4>(p, stream);
  }
}

}  // namespace

cudaError_t skinny_gemm(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.M == 0) return cudaSuccess;
  LaunchCheck chk("skinny_gemm");
  chk.in_range(p.M, 1, kSkinnyGemmMaxRows, "M").in_range(p.N, 1, INT32_MAX, "N").in_range(p.K, kBK, INT32_MAX, "K");
  chk.require(p.K % kBK == 0, "K must be a multiple of 64");
  chk.not_null(p.x, "x").not_null(p.W, "W").not_null(p.y, "y");
  chk.require(p.y_dtype == DType::bf16 || p.y_dtype == DType::f32, "y_dtype must be bf16 or f32");
  const bool swiglu = p.swiglu_group != 0;
  chk.require(!swiglu || p.swiglu_group == 8, "swiglu_group must be 0 or 8");
  chk.require(!swiglu || p.N % 16 == 0, "the SwiGLU epilogue needs N % 16 == 0");
  chk.require(!swiglu || p.y_dtype == DType::bf16, "the SwiGLU epilogue writes bf16 (y_dtype)");
  chk.require(!swiglu || p.act_dtype == DType::bf16 || p.act_dtype == DType::f32, "act_dtype must be bf16 or f32");
  const int64_t ldx = p.ldx ? p.ldx : p.K, ldy = p.ldy ? p.ldy : (swiglu ? p.N / 2 : p.N);
  chk.require(ldx >= p.K && ldx % 8 == 0, "ldx must be >= K and a multiple of 8");
  chk.require(ldy >= (swiglu ? p.N / 2 : p.N), swiglu ? "ldy must be >= N / 2" : "ldy must be >= N");
  chk.require(dev::aligned16(p.x) && dev::aligned16(p.W), "x and W must be 16-byte aligned");
  chk.in_range(p.splits, 1, std::min(p.K / kBK, 65535), "splits");
  chk.require(p.splits <= 1 || (p.workspace && (p.counters || p.defer_sum)), "splits > 1 needs workspace and counters");
  chk.require(!p.defer_sum || !swiglu, "defer_sum cannot go with the SwiGLU epilogue");
  chk.require(
      p.block_rows == 0 || p.block_rows == 64 || p.block_rows == 128 || p.block_rows == 256 || p.block_rows == 272,
      "block_rows must be 0, 64, 128, 256 or 272");
  if (!chk.ok()) return cudaErrorInvalidValue;
  switch (p.block_rows) {
    case 272: return launch_tma<272, 5>(p, stream);  // 195 KB of ring: one block an SM
    case 256: return launch_tma<256, 5>(p, stream);  // 184 KB of ring: one block an SM
    case 128: return launch_tma<128, 5>(p, stream);  // 102 KB: two
    default: return launch_tma<kBN, kStages>(p, stream);
  }
}

}  // namespace sg
