// skinny_gemm.h: y = x W^T for few rows (decode: M <= 32 tokens), bf16 x and W, f32 accumulation,
// y bf16 or f32: the projections of a decode step, where the GEMM is a stream of weight bytes and
// a library GEMM pays a fixed 3-5 us per call (its split-K reduction kernel, ramp and tail) on
// weights of 20-100 MB. Tensor cores with the weight on the wide side: mma.sync m16n8k16 with
// A = 16 rows of W, B = 8 tokens of x, so M only sets the number of n8 tiles (1..4).
//
// Grid (N / 64 row blocks, splits): block = 1 producer warp + 4 consumer warps (consumer w owns W
// rows 16 w .. 16 w + 15 of its row block). The producer streams the block's K range in 64-wide
// tiles into an 8-stage shared-memory ring with two TMA copies a tile (the W box and the x box,
// 2-D tensor maps with the 128-byte swizzle, zero fill past N and M), each stage guarded by a
// full and an empty mbarrier; no block-wide barrier in the K loop. With splits > 1 every block
// writes its f32 partial [M, 64] to the workspace and the row block's last block to finish (a
// per-row-block counter) sums the partials in split order and writes y: deterministic, graph-safe,
// and the counters are zero again after every launch. sm_90 (TMA); the tensor-map encoder comes
// from the driver at run time (nothing links libcuda).
// Numerics: products of bf16 are exact in f32; tensor-core accumulation (f32, not IEEE order)
// over each block's K range, then the partials in split order; not the bytes of cuBLAS (a
// setting of the model step, ModelStepOptions::gemm, within the GEMM test tolerance).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/numeric.h"
#include "kernels/skinny_gemm_shapes.h"

namespace sg {

struct SkinnyGemmParams {
  const void* x = nullptr;  // [M, ldx] bf16, 16-byte aligned, ldx % 8 == 0
  int64_t ldx = 0;          // 0 = K
  const void* W = nullptr;  // [N, K] bf16 contiguous, 16-byte aligned
  void* y = nullptr;        // [M, ldy] bf16 or f32
  int64_t ldy = 0;          // 0 = N
  DType y_dtype = DType::bf16;
  int M = 0, N = 0, K = 0;      // 1 <= M <= 32, N >= 1, K % 64 == 0
  int splits = 1;               // K ranges (skinny_gemm_pick_splits); > 1 needs workspace and counters
  int block_rows = 0;           // W rows a block: 64, 128, 256 (skinny_gemm_block_rows), 272; 0 = 64
  float* workspace = nullptr;   // skinny_gemm_workspace_bytes(M, N, splits)
  int32_t* counters = nullptr;  // [ceil(N / 64)], zero before the launch (left zero)
  // With splits > 1: the blocks only write their f32 partials (split s at workspace + s M N, [M, N]),
  // y and the counters untouched, and the kernel after sums them in split order from 0.0f (rmsnorm's
  // x_splits), which gives the bytes this GEMM's y would have held. Not with the SwiGLU epilogue.
  bool defer_sum = false;
  // SwiGLU epilogue (0 = off, 8): W's rows interleave gate_proj and up_proj rows in groups of 8
  // (swiglu.h), and instead of y = x W^T the kernel writes act = silu(gate) * up, [M, ldy] bf16
  // (ldy >= N / 2; 0 = N / 2), with the bytes the swiglu kernel gives on this GEMM's bf16 y
  // (interleave 8, act_dtype, live_rows). Needs N % 16 == 0 and y_dtype bf16.
  int swiglu_group = 0;
  DType act_dtype = DType::bf16;       // silu(gate) rounded to bf16 before the product, or f32 (not rounded)
  const int32_t* live_rows = nullptr;  // optional [1]: tokens at or past it get zero rows
};

// cudaErrorInvalidValue on unsupported shapes, dtypes, alignment, block rows or a missing workspace;
// cudaErrorNotSupported when the driver cannot encode the tensor maps; else the launch error.
// M == 0 does nothing.
cudaError_t skinny_gemm(const SkinnyGemmParams& p, cudaStream_t stream);

}  // namespace sg
