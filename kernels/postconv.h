// postconv.h: GDN post-conv prep: split the conv output row into q | k | v, L2-normalise q and k
// per head (sum of squares in the contract's tree order), copy v, and compute the gates
// beta = sigmoid(b) and g = -exp(A_log) * softplus(a + dt_bias) in f32.
// Arms: `megablock` (reference), `fast`, `split`, `token_tile` (see ARMS.md), each byte-identical to
// `megablock` (kernels in postconv.cu, postconv_split.cu, postconv_token_tile.cu). On the H200,
// 4b-prefill-32x1024 bf16: token_tile 260 us (97% of the 253 us floor), fast 646 us, megablock 1752 us.
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
  const void* a = nullptr;  // [T, a_stride], first Hv used
  int64_t a_stride = 0;
  const void* b = nullptr;  // [T, b_stride], first Hv used
  int64_t b_stride = 0;
  DType ab_dtype = DType::bf16;
  const float* A_log = nullptr;    // [Hv]
  const float* dt_bias = nullptr;  // [Hv]
  void* q = nullptr;               // [T, Hk, Dk]
  void* k = nullptr;               // [T, Hk, Dk]
  void* v = nullptr;               // [T, Hv, Dv]
  DType qkv_dtype = DType::bf16;
  float* g = nullptr;     // [T, Hv] f32
  float* beta = nullptr;  // [T, Hv] f32
  int T = 0, Hk = 0, Hv = 0, Dk = 0, Dv = 0;
};

// Launches the contract's arm (made by postconv_contract for a T >= p.T: tokens >= p.T are skipped).
// Returns cudaErrorInvalidValue without launching on bad params (sizes, dtypes other than f32/bf16),
// a contract that covers fewer than p.T tokens, or token_tile with Dk or Dv != 128; else the launch
// error. T = 0 launches nothing.
cudaError_t postconv(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream);

}  // namespace sg
