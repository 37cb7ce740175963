// gemm.h: the projections of the model step through cuBLAS: y = x W^T with x [T, in] and W [out, in]
// (Hugging Face's [out, in] layout, y = W x per row), bf16 (or f16/f32) inputs, f32 accumulation,
// output bf16 or f32. The handle must be bound to the stream (CublasHandle does that) and carry a
// workspace allocated beforehand, so calls can be captured into CUDA graphs; run each shape once
// before capture so nothing initialises lazily inside a capture.
#pragma once
#include "engine/cuda_handles.h"
#include "engine/tensor.h"

namespace sg {

// x: [T, in] row-major (row stride x.stride[0] >= in), W: [out, in] contiguous, y: [T, out] with
// row stride y.stride[0] >= out. x and W share a dtype (bf16, f16 or f32); y has that dtype or f32.
// T = 0 does nothing. Throws sg::Error on shape or dtype mismatch, naming the views.
// beta 1 adds the product to y in place (y = x W^T + y: cuBLAS reads y and sums in f32; whether it
// rounds the product to y's dtype before the add depends on the kernel it picks, as
// tools/probes/cublas_beta_probe.cu measures); 0 (the default) overwrites y.
void gemm_xwt(const CublasHandle& h, const TensorView& x, const TensorView& W, const TensorView& y, float beta = 0.0f);
// The checks of gemm_xwt (also those of the cuBLASLt path, gemm_lt.h); throws sg::Error.
void check_xwt(const TensorView& x, const TensorView& W, const TensorView& y);
// bf16, f16, f32 -> the CUDA data type; throws sg::Error on anything else.
cudaDataType_t gemm_cuda_type(DType t);

}  // namespace sg
