// gemm_wgmma_shapes.cpp: the wgmma GEMM's shape rules (gemm_wgmma_shapes.h).
#include "kernels/gemm_wgmma_shapes.h"

#include <cstdint>

namespace sg {

bool gemm_wgmma_supports(int64_t M, int64_t N, int64_t K, int swiglu_group) {
  return M >= 0 && M <= INT32_MAX && N >= 8 && N <= INT32_MAX && N % (swiglu_group ? 16 : 8) == 0 && K >= 8 &&
         K <= INT32_MAX && K % 8 == 0 && (swiglu_group == 0 || swiglu_group == 8);
}

}  // namespace sg
