// gemm_wgmma.h: y = x W^T for prefill-sized steps (many rows) on the sm_90a warpgroup tensor cores,
// bf16 x and W, f32 accumulation, bf16 y; optionally with the MLP's SwiGLU in its epilogue, so that
// the gate_up projection writes act = silu(gate) * up and no [T, 2I] intermediate exists.
//
// Persistent clusters of two blocks (one block an SM). A block: a producer warpgroup (one thread
// issues TMA copies of 128 x 64 tiles of x and 256 x 64 tiles of W, 128-byte swizzled, into a ring
// of four stages) and two consumer warpgroups (rows 0-63 and 64-127 of a 128 x 256 output tile:
// four m64n256k16 products a stage). The two blocks of a cluster take row tiles 2p and 2p + 1 of
// one column tile and each copies half of the W tile into both (TMA multicast), so W is read once
// for 256 rows. Tiles are walked in groups of eight column tiles, column tiles fastest, so that the
// blocks running together share their tiles in L2. The consumers keep a finished tile as packed
// bf16 pairs in registers and store it, one 16-byte group a lane after each of the next tile's first
// stages, under that tile's products ("deferred stores": storing a tile at once stops the tensor
// cores for a sixth of the time); with SwiGLU, one output pair a lane (two SiLUs) after each of the
// first 32 stages and a group's store after its fourth pair, so that the exps and divisions spread
// over the tile instead of loading its first stages. Copies past M, N or K read zeros; no store lands past M or N.
//
// Numerics: each output is the f32 sum over K of exact bf16 products, accumulated by the tensor
// cores 16 at a time in K order, rounded once to bf16. cuBLAS promises no order of its own, so this
// is a setting of the model step (ModelStepOptions::gemm, `wgmma`) within the GEMM test tolerance,
// not an arm; on inputs whose sums are exact in f32 (the probe's, a GPU test's) every correct order
// gives the same bytes. The SwiGLU epilogue gives the bytes of this GEMM's plain y followed by the swiglu kernel
// (interleave 8, bf16 activation): gate and up are the rounded bf16 outputs and the activation is
// dev::swiglu_of_silu's, tokens at or past *live_rows written as zeros.
//
// Graph-safe: the grid depends on M, N and the SM count only; nothing is allocated.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/gemm_wgmma_shapes.h"

namespace sg {

struct GemmWgmmaParams {
  const void* x = nullptr;  // [M, ldx] bf16, 16-byte aligned
  int64_t ldx = 0;          // elements between rows, >= K, % 8 == 0; 0 = K
  const void* W = nullptr;  // [N, K] bf16 contiguous, 16-byte aligned
  void* y = nullptr;        // [M, ldy] bf16, 16-byte aligned: N columns, N / 2 with SwiGLU
  int64_t ldy = 0;          // elements between rows, >= the columns, % 8 == 0; 0 = the columns
  int M = 0, N = 0, K = 0;  // M >= 0; N >= 8, N % 8 == 0 (% 16 with SwiGLU); K >= 8, K % 8 == 0
  // SwiGLU epilogue (0 = off, 8): W's rows interleave gate_proj and up_proj rows in groups of 8
  // (swiglu.h), and y = silu(gate) * up, [M, N / 2].
  int swiglu_group = 0;
  const int32_t* live_rows = nullptr;  // optional [1], SwiGLU only: rows at or past it written as zeros
  int sms = 0;                         // SMs the grid may fill; 0 = the device's
};

// Whether gemm_wgmma would take these params on a device of compute capability 9.0 (shape, strides,
// pointers and their alignment: the launcher's own rules); a refusal is left as the thread's launch
// refusal (launch_check.h).
bool gemm_wgmma_supports(const GemmWgmmaParams& p);

// cudaErrorInvalidValue on unsupported shapes or params (a refusal naming the field), a null or
// misaligned pointer; cudaErrorNoKernelImageForDevice on a device other than compute capability
// 9.0; cudaErrorNotSupported when the driver cannot encode the tensor maps; else the launch's error.
// M == 0 does nothing.
cudaError_t gemm_wgmma(const GemmWgmmaParams& p, cudaStream_t stream);

}  // namespace sg
