// gdn_decode_prep.h: the first kernel of the `prep` arm of gdn.decode: conv update and post-conv of
// one decode token in one launch (the delta rule follows as in the unfused path). Block (k-head hk,
// row r), kGdnDecodePrepThreads threads: the conv of the head's q and k channels and of the v
// channels of its Hv/Hk v-heads (conv.update's arithmetic: acc = bias, fmaf over the K-1 state taps
// oldest first, then the new input; SiLU; one rounding to the activation dtype, where conv.update
// stores its output), the conv state rolled as conv.update rolls it; then q and k L2-normalised by
// post-conv's reference tree (postconv_common.cuh) and rounded once, v as it came out of the conv,
// and the gates g, beta of the v-heads. The conv output is never stored, so q, k, v, g, beta and
// the conv state are byte-identical to conv.update -> postconv (any of their arms), padding rows
// (slot < 0) included: zero q, k, v, gates from a and b, no state touched.
// Before its dependency wait (kernels/launch.cuh) it reads the row's slot, the conv weights and
// bias, and its channels' conv state (only this op touches that state within a step).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/contracts.h"
#include "kernels/numeric.h"

namespace sg {

struct GdnDecodePrepParams {
  const void* x = nullptr;  // [rows, x_stride] conv input (q | k | v channels), act dtype
  int64_t x_stride = 0;
  const void* a = nullptr;  // [rows, a_stride], first Hv used, act dtype
  int64_t a_stride = 0;
  const void* b = nullptr;  // [rows, b_stride]
  int64_t b_stride = 0;
  DType act = DType::bf16;     // x, a, b, and q, k, v as post-conv writes them
  void* conv_state = nullptr;  // [num_slots, C, K-1] last K-1 raw inputs, oldest first
  DType conv_state_dtype = DType::bf16;
  const float* w = nullptr;        // [C, K] f32, tap 0 oldest
  const float* bias = nullptr;     // [C] or null
  const float* A_log = nullptr;    // [Hv]
  const float* dt_bias = nullptr;  // [Hv]
  const int32_t* slots = nullptr;  // [rows]; < 0: padding (zero q, k, v; gates computed; no state touched)
  void* q = nullptr;               // [rows, Hk, Dk] act
  void* k = nullptr;               // [rows, Hk, Dk] act
  void* v = nullptr;               // [rows, Hv, Dv] act
  float* g = nullptr;              // [rows, Hv]
  float* beta = nullptr;           // [rows, Hv]
  int rows = 0, Hk = 0, Hv = 0, Dk = 0, Dv = 0, K = 0;
};

// cudaErrorInvalidValue on a shape it is not built for (gdn_decode_prep_fits, contracts.h: the
// contract falls back to unfused there), bad dtypes or null pointers; else the launch error.
// rows == 0 launches nothing.
cudaError_t gdn_decode_prep(const GdnDecodePrepParams& p, cudaStream_t stream);

}  // namespace sg
