// gemm_wgmma_shapes.h: the shape rules of the prefill GEMM on wgmma (gemm_wgmma.h), CUDA-free so
// that the CPU tests cover them.
#pragma once
#include <cstdint>

namespace sg {

// True for the shapes the kernel takes: 0 <= M <= INT32_MAX rows (M = 0 launches nothing),
// 8 <= N <= INT32_MAX outputs, a multiple of 8 (of 16 with the SwiGLU epilogue, whose y has N / 2
// columns), 8 <= K <= INT32_MAX, a multiple of 8, and swiglu_group 0 (off) or 8. The launcher's
// params check (gemm_wgmma_supports(const GemmWgmmaParams&)) applies the same rules, field by
// field, and adds the strides and pointers.
bool gemm_wgmma_supports(int64_t M, int64_t N, int64_t K, int swiglu_group);

}  // namespace sg
