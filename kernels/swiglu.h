// swiglu.h: the MLP activation act = silu(gate) * up (docs/MODEL.md), read from a fused gate|up
// projection output. Hugging Face's Qwen MLP keeps gate_proj and up_proj as two separate [I, H]
// linears; the engine concatenates their rows into one [2I, H] weight, first the I gate_proj rows
// then the I up_proj rows, so one GEMM gives gu = [T, 2I] with gate in columns [0, I) and up in
// columns [I, 2I).
// Arithmetic, as ref::swiglu_mlp does it (kernels/ref/mlp_ref.h), in f32:
//   a = silu(g) = g / (1 + expf(-g)), rounded to act_dtype (HF materialises it: bf16 in a bf16 model)
//   y = a * u, rounded once to y_dtype.
// act_dtype = f32 skips the intermediate rounding (the reference's Store::f32).
// Grid: 1-D, T * ceil(I / 1024) blocks of 256 threads (T = padded token count, the graph key).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/numeric.h"

namespace sg {

struct SwigluParams {
  const void* gu = nullptr;  // [T, gu_stride]: gate [0, I) | up [I, 2I), gu_dtype f32 or bf16
  DType gu_dtype = DType::bf16;
  int64_t gu_stride = 0;  // elements between tokens, >= 2I; 0 = 2I
  void* y = nullptr;      // [T, I] row-major, y_dtype f32 or bf16; must not overlap gu
  DType y_dtype = DType::bf16;
  DType act_dtype = DType::bf16;  // dtype silu(gate) is rounded to before the product
  int T = 0, I = 0;
  // Optional [1] device count of live tokens: tokens t >= *live_rows write zeros and read nothing.
  const int32_t* live_rows = nullptr;
};

// Returns cudaErrorInvalidValue on bad params, else the launch error.
cudaError_t swiglu(const SwigluParams& p, cudaStream_t stream);

}  // namespace sg
