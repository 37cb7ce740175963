// delta_rule_device.cuh: the recurrent gated delta-rule step for one state column, shared by the
// delta_rule.decode kernel and the fused gdn.decode arm so both round identically.
//   column j of S (f32, Dk rows, row stride `stride` floats):
//   s_i = S[i][j] * decay; kv = fmaf chain over i of s_i * k_i; u = (v_j - kv) * beta;
//   s_i = fmaf(k_i, u, s_i); o = fmaf chain over i of s_i * qs_i (qs = q / sqrt(Dk)); S[i][j] = s_i.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace sg::dev {

template <int DK>
__device__ __forceinline__ float delta_rule_column(float* __restrict__ S, int64_t stride, const float* ks,
                                                   const float* qs, float decay, float beta, float v) {
  float s[DK];
#pragma unroll
  for (int i = 0; i < DK; ++i) s[i] = S[static_cast<int64_t>(i) * stride] * decay;
  float kv = 0.0f;
#pragma unroll
  for (int i = 0; i < DK; ++i) kv = fmaf(s[i], ks[i], kv);
  const float u = (v - kv) * beta;
  float o = 0.0f;
#pragma unroll
  for (int i = 0; i < DK; ++i) {
    s[i] = fmaf(ks[i], u, s[i]);
    o = fmaf(s[i], qs[i], o);
    S[static_cast<int64_t>(i) * stride] = s[i];
  }
  return o;
}

}  // namespace sg::dev
