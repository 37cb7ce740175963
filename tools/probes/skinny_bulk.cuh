// skinny_bulk.cuh: a probe variant of the skinny GEMM (kernels/skinny_gemm.h), included by
// gemm_lt_probe.cu after kernels/skinny_gemm.cu (whose finish_block it uses). One producer warp streams W and
// x tiles into a ring of shared-memory stages with 1-D bulk copies (cp.async.bulk, the copy engine of sm_90) that
// complete on an mbarrier per stage; CW consumer warps wait on that barrier, run the same mma.sync tiles as the
// cp.async kernel, and free the stage through a second mbarrier. Nothing waits on a block-wide barrier inside the K
// loop, and the producer runs up to S stages ahead. Rows are padded by 16 bytes so that the 8 rows
// an ldmatrix reads fall on different banks. sm_90 only. Correct (the probe checks it against
// cuBLAS) but 2-4x slower than the cp.async kernel: one bulk copy per 128-512-byte row costs more
// than the bytes it moves (docs/BENCHMARKS.md). The library's kernel (one 2-D tensor-map copy per
// tile) is the fast one.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/mma_util.cuh"
#include "kernels/skinny_gemm.h"
#include "kernels/tma_util.cuh"

namespace sg::bulk {

using tma::mbar_arrive;
using tma::mbar_arrive_expect_tx;
using tma::mbar_fence_init;
using tma::mbar_init;
using tma::mbar_wait;

// bytes (a multiple of 16) global -> shared, completing on mbarrier `bar`; both addresses 16-byte aligned.
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

}  // namespace sg::bulk

namespace sg {
namespace {

using mma::ldmatrix_x4;
using mma::mma_bf16;
using mma::smem_addr;

// The bulk-copy kernel (skinny_gemm_bulk.cuh): BN W rows per block (16 per consumer warp), warp 0
// produces. Stage layout: BN W rows, then 8 NT x rows, each BK + 8 elements (16 bytes of padding).
template <int BN, int BK, int S, int NT, bool kF32Out, int R>
__global__ void __launch_bounds__(32 * (1 + BN / 16))
    skinny_bulk_kernel(const SkinnyGemmParams p, int tiles_per_split) {
  constexpr int kRow = BK + 8;                  // bf16 elements per smem row
  constexpr int kStage = (BN + 8 * NT) * kRow;  // bf16 elements per stage
  constexpr int CW = BN / 16;                   // consumer warps
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[S], empty[S];
  auto* ring = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  const int rb = blockIdx.x, s = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int KT = p.K / BK;
  const int t0 = s * tiles_per_split, t1 = min(KT, t0 + tiles_per_split);
  const int nt = max(0, t1 - t0);
  const int n0 = rb * BN;
  const int rows = min(BN, p.N - n0);
  const int rot = R == 1 && nt > 0 ? rb % nt : 0;
  if (tid == 0) {
    for (int i = 0; i < S; ++i) {
      bulk::mbar_init(smem_addr(&full[i]), 1);
      bulk::mbar_init(smem_addr(&empty[i]), CW);
    }
    bulk::mbar_fence_init();
  }
  __syncthreads();

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  const int cw = warp - 1;
  if (warp == 0) {
    // Producer: tile i into stage i % S once the consumers freed it (round i / S - 1).
    const auto* W = static_cast<const __nv_bfloat16*>(p.W);  // [N, K]
    const auto* x = static_cast<const __nv_bfloat16*>(p.x);  // [M, ldx]
    const int64_t ldx = p.ldx ? p.ldx : p.K;
    const uint32_t tx = static_cast<uint32_t>(rows + p.M) * BK * 2;
    for (int i = 0; i < nt; ++i) {
      const int st = i % S;
      if (i >= S) {
        bulk::mbar_wait(smem_addr(&empty[st]), ((i / S) - 1) & 1);
        tma::release_reads();  // as skinny_gemm.cu: the consumers' reads before this refill
      }
      const int64_t k0 = static_cast<int64_t>(t0 + (i + rot) % nt) * BK;
      __nv_bfloat16* ws_ = ring + st * kStage;
      const uint32_t bar = smem_addr(&full[st]);
      if (lane == 0) bulk::mbar_arrive_expect_tx(bar, tx);
      __syncwarp();
      for (int r = lane; r < rows; r += 32)
        bulk::bulk_copy(smem_addr(ws_ + r * kRow), W + static_cast<int64_t>(n0 + r) * p.K + k0, BK * 2, bar);
      if (lane < p.M) bulk::bulk_copy(smem_addr(ws_ + (BN + lane) * kRow), x + lane * ldx + k0, BK * 2, bar);
    }
  } else {
    // ldmatrix lane roles as in the cp.async kernel, on padded rows.
    const int a_row = cw * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
    const int b_row = lane & 7, b_chunk = lane >> 3;
    for (int i = 0; i < nt; ++i) {
      const int st = i % S;
      bulk::mbar_wait(smem_addr(&full[st]), (i / S) & 1);
      const __nv_bfloat16* ws_ = ring + st * kStage;
      const __nv_bfloat16* xs_ = ws_ + BN * kRow;
#pragma unroll
      for (int kp = 0; kp < BK / 32; ++kp) {
        uint32_t a0[4], a1[4];
        ldmatrix_x4(a0, smem_addr(ws_ + a_row * kRow + (4 * kp + a_chunk) * 8));
        ldmatrix_x4(a1, smem_addr(ws_ + a_row * kRow + (4 * kp + 2 + a_chunk) * 8));
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          uint32_t b[4];
          ldmatrix_x4(b, smem_addr(xs_ + (8 * j + b_row) * kRow + (4 * kp + b_chunk) * 8));
          mma_bf16(acc[j], a0, b[0], b[1]);
          mma_bf16(acc[j], a1, b[2], b[3]);
        }
      }
      __syncwarp();
      if (lane == 0) bulk::mbar_arrive(smem_addr(&empty[st]));
    }
  }

  finish_block<BN, NT, kF32Out>(p, acc, n0, rb, s, warp, lane, p.M);  // (no SwiGLU epilogue here)
}

template <int BN, int BK, int S, int NT, int R>
cudaError_t launch_bulk_nt(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int KT = p.K / BK;
  const int tps = (KT + p.splits - 1) / p.splits;
  const dim3 grid(static_cast<unsigned>((p.N + BN - 1) / BN), static_cast<unsigned>(p.splits));
  constexpr size_t smem = static_cast<size_t>(S) * (BN + 8 * NT) * (BK + 8) * 2;
  constexpr int threads = 32 * (1 + BN / 16);
  if (p.y_dtype == DType::f32) {
    auto* k = skinny_bulk_kernel<BN, BK, S, NT, true, R>;
    if (const cudaError_t e = dev::allow_dynamic_smem(k, smem); e != cudaSuccess) return e;
    k<<<grid, threads, smem, stream>>>(p, tps);
  } else {
    auto* k = skinny_bulk_kernel<BN, BK, S, NT, false, R>;
    if (const cudaError_t e = dev::allow_dynamic_smem(k, smem); e != cudaSuccess) return e;
    k<<<grid, threads, smem, stream>>>(p, tps);
  }
  return cudaGetLastError();
}

template <int BN, int BK, int S, int R = 1>
cudaError_t launch_bulk(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.K % BK != 0 || p.splits > p.K / BK) return cudaErrorInvalidValue;
  switch ((p.M + 7) / 8) {
    case 1: return launch_bulk_nt<BN, BK, S, 1, R>(p, stream);
    case 2: return launch_bulk_nt<BN, BK, S, 2, R>(p, stream);
    case 3: return launch_bulk_nt<BN, BK, S, 3, R>(p, stream);
    default: return launch_bulk_nt<BN, BK, S, 4, R>(p, stream);
  }
}

}  // namespace
}  // namespace sg
