// swiglu.h: the MLP activation act = silu(gate) * up (docs/MODEL.md), read from a fused gate|up
// projection output. Hugging Face's Qwen MLP keeps gate_proj and up_proj as two separate [I, H]
// linears; the engine concatenates their rows into one [2I, H] weight, first the I gate_proj rows
// then the I up_proj rows, so one GEMM gives gu = [T, 2I] with gate in columns [0, I) and up in
// columns [I, 2I) ("halves"); or, where I % 8 == 0, interleaved in groups of 8 rows (weight rows
// 16 j .. 16 j + 7 = gate_proj rows 8 j .., the next 8 = up_proj rows 8 j ..), so that gate i and
// up i land in one 16-row tile of the skinny GEMM, whose epilogue then writes act itself
// (skinny_gemm.h, swiglu_group) with this kernel's bytes (dev::swiglu_value).
// Arithmetic, as ref::swiglu_mlp does it (kernels/ref/mlp_ref.h), in f32:
//   a = silu(g) = g / (1 + expf(-g)), rounded to act_dtype (HF materialises it: bf16 in a bf16 model)
//   y = a * u, rounded once to y_dtype.
// act_dtype = f32 skips the intermediate rounding (the reference's Store::f32).
// Grid: 1-D, 256 threads a block (T = padded token count, the graph key): bf16 in and out with
// I % 8 == 0 and 16-byte aligned rows, groups of 8 outputs from two 16-byte loads each, one group
// a thread (ceil(T I / 2048) blocks) or, from 2^18 groups on, four a thread with every load before
// the first store (ceil(T I / 8192) blocks); otherwise T * ceil(I / 1024) blocks, 4 outputs a
// thread element by element.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/numeric.h"

namespace sg {

struct SwigluParams {
  const void* gu = nullptr;  // [T, gu_stride]: gate | up (halves or groups of 8), gu_dtype f32 or bf16
  DType gu_dtype = DType::bf16;
  int64_t gu_stride = 0;  // elements between tokens, >= 2I; 0 = 2I
  void* y = nullptr;      // [T, I] row-major, y_dtype f32 or bf16; must not overlap gu
  DType y_dtype = DType::bf16;
  DType act_dtype = DType::bf16;  // dtype silu(gate) is rounded to before the product
  int T = 0, I = 0;               // I in [1, 2^30]
  int interleave = 0;             // 0: gate | up halves; 8: groups of 8 (I % 8 == 0)
  // Optional [1] device count of live tokens: tokens t >= *live_rows write zeros and read nothing.
  const int32_t* live_rows = nullptr;
};

// Returns cudaErrorInvalidValue on bad params, else the launch error.
cudaError_t swiglu(const SwigluParams& p, cudaStream_t stream);
// Whether swiglu runs valid params `p` on its 16-byte kernel (bf16 in and out, I % 8 == 0, a row
// stride that is a multiple of 8, 16-byte aligned gu and y); the element kernel otherwise. Both
// write the same bytes.
bool swiglu_vector_path(const SwigluParams& p);

}  // namespace sg
