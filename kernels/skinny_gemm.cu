// skinny_gemm.cu: y = x W^T for M <= 32 rows on the tensor cores, stream-K (skinny_gemm.h).
#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/mma_util.cuh"
#include "kernels/skinny_gemm.h"
#include "kernels/tma_util.cuh"

namespace sg {
namespace {

using mma::ldmatrix_x4;
using mma::mma_bf16;
using mma::smem_addr;

constexpr int kBN = 64;           // W rows per row block: 16 per consumer warp
constexpr int kBK = 64;           // K per tile: one 128-byte swizzle row of bf16
constexpr int kStages = 8;        // ring depth; two CTAs fit an SM
constexpr int kCtasPerSm = 2;     // the stream-K grid: this many CTAs per SM, all resident at once
constexpr int kMaxM = 32;

// Offset (bf16 elements) of 16-byte chunk c of row r in a tile of 64-wide rows: the TMA's 128-byte
// swizzle (chunk c ^ (r % 8)), so the 8 rows an ldmatrix reads fall on different banks. A tile
// must start on a 1024-byte boundary for the pattern to line up.
__device__ __forceinline__ int swz(int r, int c) { return r * kBK + ((c ^ (r & 7)) << 3); }

// The stream-K schedule: the T = row blocks x K tiles work tiles, row block major, cut into G
// contiguous ranges; CTA c takes tiles [start(c), start(c + 1)). A row block whose tiles span
// several CTAs is a run of segments, one per CTA, in K order.
__host__ __device__ __forceinline__ int64_t range_start(int64_t c, int64_t T, int64_t G) { return c * T / G; }
// The CTA whose range holds tile t: the largest c with start(c) <= t.
__device__ __forceinline__ int64_t range_owner(int64_t t, int64_t T, int64_t G) { return ((t + 1) * G + T - 1) / T - 1; }

// Every consumer thread (warps 1 .., BN / 16 of them): a barrier that leaves the producer warp out.
template <int BN>
__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;" ::"n"(32 * (BN / 16)) : "memory");
}

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

// The end of one segment (the consumer warps' acc for row block rb over tiles [seg0, seg1)).
// A whole row block stores y. A part writes its f32 partial [M, BN] to its workspace slot (slot c
// for the segment a CTA's range starts with, G + c for the one it ends with), and the last of the
// row block's segments to finish (a per-row-block counter, left at zero) sums the partials in K
// order from 0.0f and stores y: the same bytes whichever CTA comes last. `flag`: shared memory.
template <int BN, int NT, bool kF32Out>
__device__ void finish_segment(const SkinnyGemmParams& p, const float (&acc)[NT][4], int rb, int64_t seg0,
                               int64_t seg1, int64_t cta0, int KT, int64_t T, int* flag) {
  constexpr int kThreads = 32 * (BN / 16);
  const int ctid = threadIdx.x - 32, lane = threadIdx.x & 31, cw = ctid >> 5, g = lane >> 2, tq = lane & 3;
  const int n0 = rb * BN;
  const int64_t rb0 = static_cast<int64_t>(rb) * KT, rb1 = rb0 + KT, G = gridDim.x, c = blockIdx.x;
  // acc[j]: c0 c1 = (W row 16 cw + g, tokens 8 j + 2 tq, + 1), c2 c3 = (row + 8, same tokens).
  if (seg0 == rb0 && seg1 == rb1) {
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
  const int64_t plane = static_cast<int64_t>(p.M) * BN;  // one slot: [M, BN] f32
  float* part = p.workspace + (seg0 == cta0 ? c : G + c) * plane;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int token = 8 * j + 2 * tq + (e & 1), col = cw * 16 + g + (e >> 1) * 8;
      if (token < p.M) part[token * BN + col] = acc[j][e];
    }
  }
  __threadfence();  // this thread's partial is visible before the count says so
  consumers_sync<BN>();
  const int64_t first = range_owner(rb0, T, G), last = range_owner(rb1 - 1, T, G);
  if (ctid == 0) *flag = atomicAdd(&p.counters[rb], 1) == static_cast<int>(last - first);
  consumers_sync<BN>();
  if (!*flag) return;
  __threadfence();
  // Four adjacent outputs a thread and up to 8 partial loads in flight (the sum is a chain of L2
  // round trips otherwise).
  for (int idx = ctid; idx < p.M * (BN / 4); idx += kThreads) {
    const int token = idx / (BN / 4), col = (idx % (BN / 4)) * 4;
    if (n0 + col >= p.N) continue;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t k0 = first; k0 <= last; k0 += 8) {
      float4 t[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int64_t k = k0 + i;
        if (k > last) continue;
        const int64_t slot = k == first && range_start(k, T, G) < rb0 ? G + k : k;
        t[i] = __ldcg(reinterpret_cast<const float4*>(p.workspace + slot * plane + token * BN + col));
      }
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        if (k0 + i <= last) {
          v[0] += t[i].x;
          v[1] += t[i].y;
          v[2] += t[i].z;
          v[3] += t[i].w;
        }
      }
    }
    for (int e = 0; e < 4 && n0 + col + e < p.N; ++e) store_y<kF32Out>(p, token, n0 + col + e, v[e]);
  }
  if (ctid == 0) p.counters[rb] = 0;  // ready for the next launch
}

// Block = 1 producer warp + BN / 16 consumer warps; grid G = p.ctas (stream-K ranges). Stage st of
// the ring: the W box [BN rows x 64 K] then the x box [8 NT rows x 64 K], both TMA copies that
// complete on full[st]; the consumers free it through empty[st]. The ring runs on across the row
// blocks of a CTA's range; no block-wide barrier in the K loop.
template <int BN, int S, int NT, bool kF32Out>
__global__ void __launch_bounds__(32 * (1 + BN / 16))
    skinny_gemm_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                       const SkinnyGemmParams p) {
  constexpr int kStage = (BN + 8 * NT) * kBK;  // bf16 elements a stage: a multiple of 512 (1024 bytes)
  constexpr int kConsumers = BN / 16;
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[S], empty[S];
  __shared__ int last_flag;
  const uint32_t raw = smem_addr(smem_raw);
  auto* ring = reinterpret_cast<__nv_bfloat16*>(smem_raw + (((raw + 1023) & ~1023u) - raw));  // 1024-aligned
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int KT = p.K / kBK;
  const int64_t T = static_cast<int64_t>((p.N + BN - 1) / BN) * KT, G = gridDim.x;
  const int64_t t0 = range_start(blockIdx.x, T, G), t1 = range_start(blockIdx.x + 1, T, G);
  const int nt = static_cast<int>(t1 - t0);
  if (tid == 0) {
    for (int i = 0; i < S; ++i) {
      tma::mbar_init(smem_addr(&full[i]), 1);
      tma::mbar_init(smem_addr(&empty[i]), kConsumers);
    }
    tma::mbar_fence_init();
  }
  __syncthreads();

  if (warp == 0) {
    if (lane != 0) {
      pdl_start();  // the producer's idle lanes
      return;
    }
    // Whole boxes count, zero fill past N and M included. The first S tiles of W (weights: no
    // kernel of the step writes them) are requested before pdl_wait, so under PDL the weight stream
    // starts while the previous kernel finishes; x, the previous kernel's output, after it.
    constexpr uint32_t kBytes = static_cast<uint32_t>(BN + 8 * NT) * kBK * 2;
    auto w_tile = [&](int i) {  // W box of the CTA's tile i into stage i % S
      const int64_t t = t0 + i;
      const int rb = static_cast<int>(t / KT), kt = static_cast<int>(t - static_cast<int64_t>(rb) * KT);
      const uint32_t bar = smem_addr(&full[i % S]);
      tma::mbar_arrive_expect_tx(bar, kBytes);
      tma::load_2d(smem_addr(ring + (i % S) * kStage), &w_map, kt * kBK, rb * BN, bar);
    };
    auto x_tile = [&](int i) {
      const int kt = static_cast<int>((t0 + i) % KT);
      tma::load_2d(smem_addr(ring + (i % S) * kStage + BN * kBK), &x_map, kt * kBK, 0, smem_addr(&full[i % S]));
    };
    const int first = min(nt, S);
    for (int i = 0; i < first; ++i) w_tile(i);
    pdl_start();
    for (int i = 0; i < first; ++i) x_tile(i);
    for (int i = first; i < nt; ++i) {
      tma::mbar_wait(smem_addr(&empty[i % S]), ((i / S) - 1) & 1);  // round i / S - 1 consumed
      w_tile(i);
      x_tile(i);
    }
    return;
  }

  pdl_start();  // consumers: nothing to do before the first full stage, which follows the wait
  const int cw = warp - 1;  // consumer warp: W rows 16 cw .. of each row block
  // ldmatrix lane roles: A (W rows of this warp): matrix q = lane / 8 holds rows (q & 1) * 8 ..
  // and the k-step's chunk (q >> 1); B (x rows): matrix q holds 8 tokens and chunk q of two k-steps.
  const int a_row = cw * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
  const int b_row = lane & 7, b_chunk = lane >> 3;
  int i = 0;  // ring position: the CTA's tile index
  for (int64_t seg0 = t0; seg0 < t1;) {
    const int rb = static_cast<int>(seg0 / KT);
    const int64_t seg1 = min(t1, static_cast<int64_t>(rb + 1) * KT);
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    for (int64_t t = seg0; t < seg1; ++t, ++i) {
      const int st = i % S;
      tma::mbar_wait(smem_addr(&full[st]), (i / S) & 1);
      const __nv_bfloat16* ws = ring + st * kStage;
      const __nv_bfloat16* xs = ws + BN * kBK;
#pragma unroll
      for (int kp = 0; kp < kBK / 32; ++kp) {  // pairs of k-steps
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
    finish_segment<BN, NT, kF32Out>(p, acc, rb, seg0, seg1, t0, KT, T, &last_flag);
    seg0 = seg1;
  }
}

// The driver's tensor-map encoder, looked up once (null when the driver lacks it).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const bool ok =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess;
    return ok ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f) : nullptr;
  }();
  return fn;
}

// A bf16 [rows, cols] matrix with row stride ld elements, boxes of [box_rows x 64], 128-byte swizzle.
bool make_map(CUtensorMap* m, const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows) {
  const auto encode = tensor_map_encoder();
  if (!encode) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kBK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  return encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box, elem,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <int BN, int S, int NT, bool kF32Out>
cudaError_t launch_nt(const SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr size_t smem = static_cast<size_t>(S) * (BN + 8 * NT) * kBK * 2 + 1024;  // + alignment
  CUtensorMap w_map, x_map;
  if (!make_map(&w_map, p.W, p.N, p.K, p.K, BN) || !make_map(&x_map, p.x, p.M, p.K, p.ldx ? p.ldx : p.K, 8 * NT))
    return cudaErrorNotSupported;
  auto* k = skinny_gemm_kernel<BN, S, NT, kF32Out>;
  if (const cudaError_t e = dev::allow_dynamic_smem(k, smem); e != cudaSuccess) return e;
  launch_kernel(k, dim3(static_cast<unsigned>(p.ctas)), 32 * (1 + BN / 16), smem, stream, w_map, x_map, p);
  return cudaGetLastError();
}

template <int BN, int S, int NT>
cudaError_t launch_dtype(const SkinnyGemmParams& p, cudaStream_t stream) {
  return p.y_dtype == DType::f32 ? launch_nt<BN, S, NT, true>(p, stream) : launch_nt<BN, S, NT, false>(p, stream);
}

// BN W rows a row block, S stages (the probe tries other shapes; the library runs kBN, kStages).
template <int BN, int S>
cudaError_t launch_tma(const SkinnyGemmParams& p, cudaStream_t stream) {
  switch ((p.M + 7) / 8) {
    case 1: return launch_dtype<BN, S, 1>(p, stream);
    case 2: return launch_dtype<BN, S, 2>(p, stream);
    case 3: return launch_dtype<BN, S, 3>(p, stream);
    default: return launch_dtype<BN, S, 4>(p, stream);
  }
}

// Work tiles of an [N, K] weight in BN-row blocks: row blocks x K / 64 (0 when it takes no tiles).
int64_t work_tiles(int N, int K, int BN = kBN) {
  return N >= 1 && K >= kBK ? static_cast<int64_t>((N + BN - 1) / BN) * (K / kBK) : 0;
}

}  // namespace

bool skinny_gemm_supports(int M, int N, int K) { return M >= 1 && M <= kMaxM && N >= 1 && K >= kBK && K % kBK == 0; }

int skinny_gemm_pick_ctas(int N, int K, int num_sms) {
  const int64_t T = work_tiles(N, K);
  return static_cast<int>(std::clamp<int64_t>(T, 1, static_cast<int64_t>(kCtasPerSm) * std::max(num_sms, 1)));
}

size_t skinny_gemm_workspace_bytes(int M, int N, int K, int ctas) {
  const int64_t T = work_tiles(N, K), KT = K / kBK;
  if (M < 1 || T < 1 || ctas < 2 || ctas > T) return 0;
  for (int64_t c = 1; c < ctas; ++c) {
    if (range_start(c, T, ctas) % KT != 0) return 2 * static_cast<size_t>(ctas) * M * kBN * sizeof(float);
  }
  return 0;  // every range holds whole row blocks
}

cudaError_t skinny_gemm(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.M == 0) return cudaSuccess;
  if (!skinny_gemm_supports(p.M, p.N, p.K) || !p.x || !p.W || !p.y) return cudaErrorInvalidValue;
  if (p.y_dtype != DType::bf16 && p.y_dtype != DType::f32) return cudaErrorInvalidValue;
  const int64_t ldx = p.ldx ? p.ldx : p.K, ldy = p.ldy ? p.ldy : p.N;
  if (ldx < p.K || ldx % 8 != 0 || ldy < p.N || !dev::aligned16(p.x) || !dev::aligned16(p.W))
    return cudaErrorInvalidValue;
  if (p.ctas < 1 || p.ctas > work_tiles(p.N, p.K)) return cudaErrorInvalidValue;
  if (skinny_gemm_workspace_bytes(p.M, p.N, p.K, p.ctas) > 0 && (!p.workspace || !p.counters))
    return cudaErrorInvalidValue;
  return launch_tma<kBN, kStages>(p, stream);
}

}  // namespace sg
