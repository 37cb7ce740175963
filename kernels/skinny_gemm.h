// skinny_gemm.h: y = x W^T for few rows (decode: M <= 32 tokens), bf16 x and W, f32 accumulation,
// y bf16 or f32: the projections of a decode step, where the GEMM is a stream of weight bytes and
// a library GEMM pays a fixed 3-5 us per call (its split-K reduction kernel, ramp and tail) on
// weights of 20-100 MB. Tensor cores with the weight on the wide side: mma.sync m16n8k16 with
// A = 16 rows of W, B = 8 tokens of x, so M only sets the number of n8 tiles (1..4).
//
// Stream-K: the work is T = ceil(N / 64) row blocks x K / 64 tiles, row block major, cut into
// `ctas` contiguous ranges of equal size (two CTAs an SM by default, all resident at once), so
// every SM streams the same number of weight bytes whatever N is (no tail wave). A CTA = 1
// producer warp + 4 consumer warps (consumer w owns W rows 16 w .. 16 w + 15 of the row block in
// hand). The producer streams the CTA's tiles into an 8-stage shared-memory ring with two TMA
// copies a tile (the W box and the x box, 2-D tensor maps with the 128-byte swizzle, zero fill past
// N and M), each stage guarded by a full and an empty mbarrier; no block-wide barrier in the K
// loop, and the ring runs on across row blocks. A row block whose tiles all lie in one CTA's range
// stores y; one cut by range edges is a run of segments in K order: each writes its f32 partial
// [M, 64] to the workspace and the last to finish (a per-row-block counter) sums the partials in
// K order and writes y: deterministic (the same bytes whichever CTA finishes last), graph-safe,
// and the counters are zero again after every launch. sm_90 (TMA); the tensor-map encoder comes
// from the driver at run time (nothing links libcuda).
// Numerics: products of bf16 are exact in f32; tensor-core accumulation (f32, not IEEE order)
// over each segment's K range, then the partials in K order; not the bytes of cuBLAS (a
// setting of the model step, ModelStepOptions::gemm, within the GEMM test tolerance).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/numeric.h"

namespace sg {

struct SkinnyGemmParams {
  const void* x = nullptr;  // [M, ldx] bf16, 16-byte aligned, ldx % 8 == 0
  int64_t ldx = 0;          // 0 = K
  const void* W = nullptr;  // [N, K] bf16 contiguous, 16-byte aligned
  void* y = nullptr;        // [M, ldy] bf16 or f32
  int64_t ldy = 0;          // 0 = N
  DType y_dtype = DType::bf16;
  int M = 0, N = 0, K = 0;      // 1 <= M <= 32, N >= 1, K % 64 == 0
  int ctas = 1;                 // stream-K ranges, the grid (skinny_gemm_pick_ctas), 1 .. row blocks x K / 64
  float* workspace = nullptr;   // skinny_gemm_workspace_bytes(M, N, K, ctas) (none when that is 0)
  int32_t* counters = nullptr;  // [ceil(N / 64)], zero before the launch (left zero); none when no workspace
};

// Shapes the kernel takes: 1 <= M <= 32, any N >= 1 (the last row block is partial), K a positive
// multiple of 64.
bool skinny_gemm_supports(int M, int N, int K);
// The grid for an [N, K] weight on `num_sms` SMs: two CTAs an SM, at most one a work tile.
int skinny_gemm_pick_ctas(int N, int K, int num_sms);
// f32 partials of `ctas` ranges at M rows: 0 when every range holds whole row blocks (or ctas is
// out of range), else 2 slots [M, 64] a CTA.
size_t skinny_gemm_workspace_bytes(int M, int N, int K, int ctas);

// cudaErrorInvalidValue on unsupported shapes, dtypes, alignment, a CTA count outside 1 .. row
// blocks x K / 64, or a missing workspace or counters where the ranges cut row blocks;
// cudaErrorNotSupported when the driver cannot encode the tensor maps; else the launch error.
// M == 0 does nothing.
cudaError_t skinny_gemm(const SkinnyGemmParams& p, cudaStream_t stream);

}  // namespace sg
