// conv_update.h: the GDN causal conv, decode form (one new token per row), over slot-indexed
// conv state. Arms: `grid` (grid-stride reference) and `fast` (2-D grid, V = 2, 4 or 8 channels per
// thread, V from the contract; whole 4-, 8- or 16-byte loads and stores where dtypes and alignment
// allow; see conv_update.cu).
// Both compute acc = bias; acc = fmaf(w[c][j], tap_j, acc) for j = 0..K-1; out = silu(acc).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/arms.h"
#include "kernels/contracts.h"
#include "kernels/numeric.h"

namespace sg {

struct ConvUpdateParams {
  const void* x = nullptr;  // [rows, x_stride] new raw inputs (x_stride >= C)
  int64_t x_stride = 0;
  DType x_dtype = DType::bf16;
  void* out = nullptr;  // [rows, C]
  DType out_dtype = DType::bf16;
  void* state = nullptr;  // [num_slots, C, K-1] last K-1 raw inputs, oldest first
  DType state_dtype = DType::bf16;
  const int32_t* slots = nullptr;  // [rows]; < 0 = padding row (output 0, state untouched)
  const float* w = nullptr;        // [C, K] f32, tap 0 oldest
  const float* bias = nullptr;     // [C] or null
  int rows = 0, C = 0, K = 0;
  bool silu = true;
};

// Launches the contract's arm. Returns the launch error (cudaGetLastError) without throwing.
cudaError_t conv_update(const ConvUpdateParams& p, const LaunchContract<ConvUpdateArm>& c, cudaStream_t stream);

}  // namespace sg
