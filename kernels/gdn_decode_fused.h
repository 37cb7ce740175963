// gdn_decode_fused.h: the `fused` arm of gdn.decode: conv update, post-conv and the recurrent
// delta-rule step of one decode token in one kernel, on the recurrence's grid (v-head x column
// block, row) in thread block clusters of the blocks that share a k-head (gdn_decode_contract in
// contracts.h). Each conv channel's state is read and written by one block only; the q/k conv
// outputs reach every block of the cluster through distributed shared memory. Every intermediate
// (conv output, q, k, v) is rounded to the activation dtype exactly where the unfused path stores
// it, with the same operation order, so the outputs and both states are byte-identical to
// conv.update -> postconv -> delta_rule.decode. The SSM state is f32 or bf16 (ssm_state_dtype: read
// widened, written rounded to nearest even, as delta_rule.decode with the same state_dtype; same
// grid, block, cluster and shared memory).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/contracts.h"
#include "kernels/numeric.h"

namespace sg {

struct GdnDecodeFusedParams {
  const void* x = nullptr;  // [rows, x_stride] conv input (q | k | v channels), act dtype
  int64_t x_stride = 0;
  const void* a = nullptr;  // [rows, a_stride], first Hv used, act dtype
  int64_t a_stride = 0;
  const void* b = nullptr;  // [rows, b_stride]
  int64_t b_stride = 0;
  DType act = DType::bf16;     // x, a, b, intermediates and the output
  void* conv_state = nullptr;  // [num_slots, C, K-1]
  DType conv_state_dtype = DType::bf16;
  const float* w = nullptr;            // [C, K]
  const float* bias = nullptr;         // [C] or null
  const float* A_log = nullptr;        // [Hv]
  const float* dt_bias = nullptr;      // [Hv]
  const int32_t* slots = nullptr;      // [rows]; < 0: output rows 0, no state touched
  void* ssm_state = nullptr;           // [num_slots, Hv, Dk, Dv] ssm_state_dtype
  DType ssm_state_dtype = DType::f32;  // f32, or bf16 (as DeltaRuleDecodeParams::state_dtype)
  void* out = nullptr;                 // [rows, Hv, Dv] act dtype
  int rows = 0, Hk = 0, Hv = 0, Dk = 0, Dv = 0, K = 0;
};

cudaError_t gdn_decode_fused(const GdnDecodeFusedParams& p, const LaunchContract<GdnDecodeArm>& c, cudaStream_t stream);

}  // namespace sg
