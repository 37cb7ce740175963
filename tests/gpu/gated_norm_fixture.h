// gated_norm_fixture.h: the gated RMSNorm in place on a bf16 [T, heads, n] output, as the GPU tests
// of the delta rules' fused norms take it for their reference (the norm kernel after the plain
// kernel).
#pragma once
#include <cstdint>

#include "kernels/numeric.h"
#include "kernels/rmsnorm.h"

namespace sg::test {

// gated_rmsnorm's params for out (bf16, in place) with z (bf16, token stride z_stride), the weight
// w of dtype wt, eps 1e-6 and the live row count `live` (device, may be null).
inline GatedRmsNormParams inplace_gated_norm(void* out, const void* z, int64_t z_stride, const void* w, DType wt, int T,
                                             int heads, int n, const int32_t* live) {
  GatedRmsNormParams g;
  g.x = out;
  g.x_dtype = DType::bf16;
  g.z = z;
  g.z_dtype = DType::bf16;
  g.z_token_stride = z_stride;
  g.w = w;
  g.w_dtype = wt;
  g.y = out;
  g.y_dtype = DType::bf16;
  g.T = T;
  g.heads = heads;
  g.n = n;
  g.eps = 1e-6f;
  g.live_rows = live;
  return g;
}

}  // namespace sg::test
