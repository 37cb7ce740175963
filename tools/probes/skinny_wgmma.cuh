// skinny_wgmma.cuh: a probe variant of the skinny GEMM (kernels/skinny_gemm.h) on the warpgroup
// tensor cores of sm_90a, included by gemm_lt_probe.cu after kernels/skinny_gemm.cu (whose ring,
// tensor maps and finish_block it uses; the probe is built for sm_90a). The question it answers:
// does the mma.sync kernel's multiply side (ldmatrix of W and of every token's x in every consumer
// warp, NT mma.sync a warp and 16-wide k-step) hold it below the weight stream's floor at 32 rows?
// Here a warpgroup (4 consumer warps) owns 64 W rows and issues one wgmma.mma_async m64n(8 NT)k16 a
// k-step that reads W and x straight from the stage (K-major descriptors in the TMA's 128-byte
// swizzle): no fragment loads, one instruction where the four warps issue 4 NT mma.sync (16 at 32
// rows), and one stage's multiplies run while the warps wait for the next (each stage is released
// once the wgmma group after it has been issued and the one that read it has completed:
// wait_group 1). Same grid, split-K, ring and block
// end as the library kernel; the accumulators are wgmma's m64nNk16 layout, which is mma.sync's
// m16n8k16 layout per warp, so finish_block serves both. Measured at 1, 8 and 32 rows on every
// decode projection (docs/BENCHMARKS.md), each kernel at its best block width and split count: at
// 32 rows on the 4B's shapes 0.35-0.57 us faster than the mma.sync kernel on five and 0.43 us
// slower on in_proj; at 8 rows 0.1 us faster on out_proj and o_proj and 0.3-2.4 us slower on the
// rest; at 1 row up to 1.5 us slower; slower on every 27B shape; cuBLASLt ahead of both at 32 rows.
// The multiply side is not what holds the kernel; not in the library.
#pragma once
#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/wgmma_util.cuh"

namespace sg {
namespace {

// Descriptor of a K-major operand tile in the 128-byte swizzle (a TMA copy with
// CU_TENSOR_MAP_SWIZZLE_128B of a box 64 bf16 wide): rows of 128 bytes, 16-byte chunk c of row r
// at chunk c ^ (r % 8), 8-row groups 1024 bytes apart (the stride byte offset); the leading byte
// offset is unused in this mode (one k-step, 32 bytes, lies inside a row); swizzle mode 1 in bits
// 62-63. The tile must start on a 1024-byte boundary; k-step kk of the tile starts 32 kk bytes on
// (the hardware applies the swizzle to the address it computes).
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return static_cast<uint64_t>((addr >> 4) & 0x3FFF) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}

// D[64 x 8 NT] += A[64 x 16] B[16 x 8 NT] for NT = 1..4: A and B from shared memory, both K-major
// (descriptors), d the 4 NT accumulators of the m64nNk16 layout (above).
template <int NT>
__device__ __forceinline__ void m64nk16_ss(float* d, uint64_t a, uint64_t b);
template <>
__device__ __forceinline__ void m64nk16_ss<1>(float* d, uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "l"(a), "l"(b));
}
template <>
__device__ __forceinline__ void m64nk16_ss<2>(float* d, uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, "
      "0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "l"(a), "l"(b));
}
template <>
__device__ __forceinline__ void m64nk16_ss<3>(float* d, uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n24k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11}, "
      "%12, %13, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11])
      : "l"(a), "l"(b));
}
template <>
__device__ __forceinline__ void m64nk16_ss<4>(float* d, uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, "
      "%12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b));
}

template <int BN, int S, int NT, bool kF32Out>
__global__ void __launch_bounds__(32 * (BN / 16 + 1))
    skinny_wgmma_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                        const SkinnyGemmParams p, int tiles_per_split) {
  constexpr int kStage = (BN + 8 * NT) * kBK;  // bf16 elements a stage: a multiple of 512 (1024 bytes)
  constexpr int kConsumers = BN / 16;          // consumer warps; the producer is warp kConsumers
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

  float acc[NT][4];  // acc[j][e] = the m64nNk16 accumulator 4 j + e
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  if (warp == kConsumers) {
    if (lane == 0) {
      // Whole boxes count, zero fill past N and M included; the first tiles of W (weights: no
      // kernel of the step writes them) before pdl_wait, x (the previous kernel's output) after.
      constexpr uint32_t kBytes = static_cast<uint32_t>(BN + 8 * NT) * kBK * 2;
      const int first = min(nt, p.M > 24 ? kEarlyTilesWide : S);
      for (int i = 0; i < first; ++i) {
        const uint32_t bar = smem_addr(&full[i]);
        tma::mbar_arrive_expect_tx(bar, kBytes);
        tma::load_2d(smem_addr(ring + i * kStage), &w_map, (t0 + i) * kBK, n0, bar);
      }
      pdl_start();
      for (int i = 0; i < first; ++i)
        tma::load_2d(smem_addr(ring + i * kStage + BN * kBK), &x_map, (t0 + i) * kBK, 0, smem_addr(&full[i]));
      for (int i = first; i < nt; ++i) {
        const int st = i % S;
        tma::mbar_wait(smem_addr(&empty[st]), ((i / S) - 1) & 1);  // round i / S - 1 consumed
        const int k0 = (t0 + i) * kBK;
        __nv_bfloat16* stage = ring + st * kStage;
        const uint32_t bar = smem_addr(&full[st]);
        tma::mbar_arrive_expect_tx(bar, kBytes);
        tma::load_2d(smem_addr(stage), &w_map, k0, n0, bar);
        tma::load_2d(smem_addr(stage + BN * kBK), &x_map, k0, 0, bar);
      }
    } else {
      pdl_start();  // the producer's idle lanes (they write split partials in finish_block)
    }
  } else {
    pdl_start();               // consumers: nothing to do before the first full stage, which follows the wait
    const int wg = warp >> 2;  // this warp's warpgroup: W rows 64 wg .. of the block
    for (int i = 0; i < nt; ++i) {
      const int st = i % S;
      tma::mbar_wait(smem_addr(&full[st]), (i / S) & 1);
      const uint32_t w_at = smem_addr(ring + st * kStage) + wg * 64 * kBK * 2;  // [64 rows x 128 B]
      const uint32_t x_at = smem_addr(ring + st * kStage + BN * kBK);           // [8 NT rows x 128 B]
      wgmma::fence_operands<4 * NT>(&acc[0][0]);
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk)  // 16-wide k-steps: 32 bytes into each 128-byte row
        m64nk16_ss<NT>(&acc[0][0], desc_sw128(w_at + 32 * kk), desc_sw128(x_at + 32 * kk));
      wgmma::commit();
      wgmma::wait<1>();  // every group but this stage's has completed: the previous stage is free
      wgmma::fence_operands<4 * NT>(&acc[0][0]);
      if (i > 0 && lane == 0) tma::mbar_arrive(smem_addr(&empty[(i - 1) % S]));
    }
    wgmma::wait<0>();
    wgmma::fence_operands<4 * NT>(&acc[0][0]);
  }

  // The SwiGLU epilogue's live token count, read at the block's end (skinny_gemm.cu says why).
  const int live = p.swiglu_group != 0 && p.live_rows ? *p.live_rows : p.M;
  // finish_block takes warp 0 as the producer and warp w as consumer w - 1.
  finish_block<BN, NT, kF32Out>(p, acc, n0, rb, s, warp < kConsumers ? warp + 1 : 0, lane, live);
}

template <int BN, int S, int NT, bool kF32Out>
cudaError_t launch_wgmma_nt(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int KT = p.K / kBK;
  const int tps = (KT + p.splits - 1) / p.splits;
  const dim3 grid(static_cast<unsigned>((p.N + BN - 1) / BN), static_cast<unsigned>(p.splits));
  constexpr size_t smem = static_cast<size_t>(S) * (BN + 8 * NT) * kBK * 2 + 1024;  // + alignment
  CUtensorMap w_map, x_map;
  if (!make_map(&w_map, p.W, p.N, p.K, p.K, BN) || !make_map(&x_map, p.x, p.M, p.K, p.ldx ? p.ldx : p.K, 8 * NT))
    return cudaErrorNotSupported;
  auto* k = skinny_wgmma_kernel<BN, S, NT, kF32Out>;
  if (const cudaError_t e = dev::allow_dynamic_smem(k, smem); e != cudaSuccess) return e;
  launch_kernel(k, grid, 32 * (BN / 16 + 1), smem, stream, w_map, x_map, p, tps);
  return cudaGetLastError();
}

template <int BN, int S>
cudaError_t launch_wgmma_rows(const SkinnyGemmParams& p, cudaStream_t stream) {
  const bool f32 = p.y_dtype == DType::f32;
  switch ((p.M + 7) / 8) {
    case 1: return f32 ? launch_wgmma_nt<BN, S, 1, true>(p, stream) : launch_wgmma_nt<BN, S, 1, false>(p, stream);
    case 2: return f32 ? launch_wgmma_nt<BN, S, 2, true>(p, stream) : launch_wgmma_nt<BN, S, 2, false>(p, stream);
    case 3: return f32 ? launch_wgmma_nt<BN, S, 3, true>(p, stream) : launch_wgmma_nt<BN, S, 3, false>(p, stream);
    default: return f32 ? launch_wgmma_nt<BN, S, 4, true>(p, stream) : launch_wgmma_nt<BN, S, 4, false>(p, stream);
  }
}

}  // namespace
}  // namespace sg
