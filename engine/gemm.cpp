// gemm.cpp: row-major y = x W^T as the column-major product y^T = W x^T (cublasGemmEx, W transposed).
#include "engine/gemm.h"

#include "engine/error.h"

namespace sg {

cudaDataType_t gemm_cuda_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: throw Error(fmt::format("gemm: unsupported dtype {}", dtype_name(t)));
  }
}

void check_xwt(const TensorView& x, const TensorView& W, const TensorView& y) {
  require(x.rank == 2 && W.rank == 2 && y.rank == 2, "gemm: rank-2 views expected (x {}, W {}, y {})", x.describe(),
          W.describe(), y.describe());
  const int64_t T = x.dim(0), in = x.dim(1), out = W.dim(0);
  require(W.dim(1) == in && y.dim(0) == T && y.dim(1) == out, "gemm: shapes do not match: x {} W {} y {}", x.describe(),
          W.describe(), y.describe());
  require(x.dtype == W.dtype, "gemm: x ({}) and W ({}) must share a dtype", dtype_name(x.dtype), dtype_name(W.dtype));
  require(y.dtype == x.dtype || y.dtype == DType::f32, "gemm: y must be {} or f32 (cuBLAS), got {}",
          dtype_name(x.dtype), dtype_name(y.dtype));
  require(x.stride[1] == 1 && y.stride[1] == 1 && W.is_contiguous(), "gemm: inner dimensions must be contiguous");
  require(x.stride[0] >= in && y.stride[0] >= out, "gemm: row strides too small (x {}, y {})", x.stride[0],
          y.stride[0]);
  require(T <= INT32_MAX && in <= INT32_MAX && out <= INT32_MAX, "gemm: sizes exceed int32");
}

void gemm_xwt(const CublasHandle& h, const TensorView& x, const TensorView& W, const TensorView& y, float beta) {
  check_xwt(x, W, y);
  const int64_t T = x.dim(0), in = x.dim(1), out = W.dim(0);
  if (T == 0) return;
  const float alpha = 1.0f;
  check(cublasGemmEx(h.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(out), static_cast<int>(T),
                     static_cast<int>(in), &alpha, W.data, gemm_cuda_type(W.dtype), static_cast<int>(in), x.data,
                     gemm_cuda_type(x.dtype), static_cast<int>(x.stride[0]), &beta, y.data, gemm_cuda_type(y.dtype),
                     static_cast<int>(y.stride[0]), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace sg
