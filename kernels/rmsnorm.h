// rmsnorm.h: the two RMSNorms of the model step (docs/MODEL.md), f32 math, one rounding per store.
//   rmsnorm        zero-centred weight: y = (h * inv) * (1 + w), inv = 1 / sqrtf(mean(h^2) + eps)
//                  (layer norms, final norm, attention q_norm / k_norm), with an optional fused
//                  residual add (the pre-norm fusion, see RmsNormParams::residual).
//   gated_rmsnorm  GDN output norm, weight used as is: y = (w * (x * inv)) * silu(z).
// Rows are (token, head) pairs: row (t, h) of the input starts at t * token_stride + h * head_stride,
// so q_norm can read the query half of q_proj's per-head [query | gate] rows in place.
// Numerics vs the CPU reference (kernels/ref/norm_ref.h), which sums squares sequentially:
//   each thread sums its elements in index order with fmaf, then a fixed butterfly (__shfl_xor)
//   over the lanes of the row, then (block-per-row) the warp partials in a fixed butterfly. A
//   thread owns either 8 consecutive elements (the 16-byte kernels: bf16 rows (or an f32 x with
//   round_x), bf16 or f32 weights, n % 256 == 0 for rmsnorm, n in {64, 128, 256} for the gated norm, aligned) or a
//   strided set (every other case). The order depends only on n, the dtypes and the alignment
//   (never on T, live_rows or the GPU), so results are deterministic run to run and identical
//   across bucket sizes; they differ from the sequential reference by the rounding of the sum only
//   (a few f32 ulps of inv). sqrtf and '/' are correctly rounded.
// Grid: depends only on the padded token count T (and heads, n): the gated 16-byte kernel puts a
// row on n / 8 lanes (256-thread blocks); otherwise n <= 512 -> one warp per row, 8 rows per
// 256-thread block; else one block per row (block = n / 8 for the 16-byte kernel, two rows a block
// from 1024 rows where x is one plane; else round_up(ceil(n / 8), 32) <= 1024).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/numeric.h"

namespace sg {

struct RmsNormParams {
  const void* x = nullptr;  // [T, heads, n] (strides below), x_dtype f32 or bf16
  DType x_dtype = DType::bf16;
  int64_t x_head_stride = 0;   // elements between heads of a token, >= n; 0 = n
  int64_t x_token_stride = 0;  // elements between tokens, >= (heads - 1) * head_stride + n; 0 = heads * head_stride
  // Optional fused residual add (layer norms): when `residual` is set,
  //   h = round_{residual_dtype}(x + residual)   (f32 add, one rounding)
  //   residual_out = h                            (stored in residual_dtype: the new residual stream)
  //   y = rmsnorm(h)                              (the norm reads the *rounded* h, as a model whose
  //                                                residual stream is bf16 does)
  // When `residual` is null but `residual_out` is set, h = round_{residual_dtype}(x) is stored
  // (the first layer: the embedding becomes the residual stream). Both null: h = x (no rounding).
  // residual / residual_out are contiguous [T, heads, n]; residual_out may alias residual or x
  // (each element is read and written by one thread), but not y.
  const void* residual = nullptr;
  void* residual_out = nullptr;
  DType residual_dtype = DType::bf16;
  // With residual_out set: x is first rounded to residual_dtype, h = round(round(x) + residual), so
  // that an f32 x (a projection's unrounded output) gives the bytes of that output stored in
  // residual_dtype and read back (the model step's mix-round norm setting).
  bool round_x = false;
  // x as the sum of x_splits f32 planes x_split_stride elements apart, added in plane order from
  // 0.0f: a skinny GEMM's deferred split-K partials (SkinnyGemmParams::defer_sum), so that with
  // round_x the norm sees the bytes that GEMM's bf16 y would have held. x_splits > 1 needs x_dtype
  // f32, round_x with residual_out, the 16-byte kernel's shapes (bf16 rows, n % 256 == 0, 16-byte
  // aligned) and x_split_stride >= T x token stride.
  int x_splits = 1;
  int64_t x_split_stride = 0;
  const void* w = nullptr;  // [n] zero-centred weight (scale 1 + w), f32 or bf16
  DType w_dtype = DType::f32;
  void* y = nullptr;  // [T, heads, n] contiguous, y_dtype f32 or bf16; may alias x when x is contiguous
  DType y_dtype = DType::bf16;
  int T = 0;      // padded token count (the graph key): the grid depends only on T, heads and n
  int heads = 1;  // rows per token (1 for the layer norms; Hq / Hkv for q_norm / k_norm)
  int n = 0;      // normalised length
  float eps = 1e-6f;
  // Optional [1] device count of live tokens: tokens t >= *live_rows write zeros to y and to
  // residual_out (and read nothing), so padded buckets stay defined. Null: all T tokens are live.
  const int32_t* live_rows = nullptr;
};

// Whether rmsnorm can take x as summed planes (x_splits > 1) for bf16 rows of n: the 16-byte
// kernel's lengths (a multiple of 256 above 512, at most 8192).
inline bool rmsnorm_sums_planes(int64_t n) { return n > 512 && n % 256 == 0 && n <= 8192; }

// Zero-centred RMSNorm (with the optional fused residual add). Returns cudaErrorInvalidValue on bad
// params (dtypes other than f32/bf16, n < 1, heads < 1, T < 0, null pointers), else the launch error.
cudaError_t rmsnorm(const RmsNormParams& p, cudaStream_t stream);

struct GatedRmsNormParams {
  const void* x = nullptr;  // [T, heads, n] core-attention output, x_dtype f32 or bf16
  DType x_dtype = DType::bf16;
  int64_t x_token_stride = 0;  // >= heads * n; 0 = heads * n; heads are n apart
  const void* z = nullptr;     // [T, heads, n] gate (in_proj_z output), z_dtype f32 or bf16
  DType z_dtype = DType::bf16;
  int64_t z_token_stride = 0;  // >= heads * n; 0 = heads * n; heads are n apart
  const void* w = nullptr;     // [n] weight used as is, f32 or bf16
  DType w_dtype = DType::f32;
  void* y = nullptr;  // [T, heads, n] contiguous; may alias x when x is contiguous
  DType y_dtype = DType::bf16;
  int T = 0, heads = 0, n = 0;  // T padded tokens, heads = Hv, n = Dv
  float eps = 1e-6f;
  const int32_t* live_rows = nullptr;  // optional [1]: tokens >= *live_rows write zeros
};

// GDN gated RMSNorm: y = (w * (x * inv)) * silu(z), silu(z) = z / (1 + expf(-z)).
cudaError_t gated_rmsnorm(const GatedRmsNormParams& p, cudaStream_t stream);
// True when gated_rmsnorm(p) runs the 16-byte kernel (bf16 x, z and y, n 64, 128 or 256, 16-byte
// aligned bases and token strides): the order that the delta rule's fused norm reproduces
// (delta_rule.h), so a caller fuses only where this holds.
bool gated_rmsnorm_vector_path(const GatedRmsNormParams& p);

}  // namespace sg
