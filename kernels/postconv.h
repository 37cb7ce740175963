// postconv.h: GDN post-conv prep: split the conv output row into q | k | v, L2-normalise q and k
// per head (sum of squares in the contract's tree order), copy v, and compute the gates
// beta = sigmoid(b) and g = -exp(A_log) * softplus(a + dt_bias) in f32.
// Arms: `megablock` (reference), `fast`, `split`, `token_tile` (see ARMS.md); this file holds
// the ones implemented so far, each byte-identical to `megablock`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/arms.h"
#include "kernels/contracts.h"
#include "kernels/numeric.h"

namespace sg {

struct PostconvParams {
  const void* conv = nullptr;  // [T, conv_stride], C = 2*Hk*Dk + Hv*Dv channels (q | k | v)
  int64_t conv_stride = 0;
  DType conv_dtype = DType::bf16;
  const void* a = nullptr;     // [T, a_stride], first Hv used
  int64_t a_stride = 0;
  const void* b = nullptr;     // [T, b_stride], first Hv used
  int64_t b_stride = 0;
  DType ab_dtype = DType::bf16;
  const float* A_log = nullptr;    // [Hv]
  const float* dt_bias = nullptr;  // [Hv]
  void* q = nullptr;  // [T, Hk, Dk]
  void* k = nullptr;  // [T, Hk, Dk]
  void* v = nullptr;  // [T, Hv, Dv]
  DType qkv_dtype = DType::bf16;
  float* g = nullptr;     // [T, Hv] f32
  float* beta = nullptr;  // [T, Hv] f32
  int T = 0, Hk = 0, Hv = 0, Dk = 0, Dv = 0;
};

cudaError_t postconv(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream);

}  // namespace sg
