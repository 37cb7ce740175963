// cublas_beta_probe.cu: how cublasGemmEx rounds y = x W^T + y with bf16 operands, f32 compute and
// beta = 1 (the residual stream adding a projection in place). Three runs of each shape on the
// same inputs:
//   p16:  beta = 0, bf16 output (the product rounded to bf16);
//   p32:  beta = 0, f32 output (the product unrounded);
//   sum:  beta = 1, bf16 output into a copy of the stream r.
// Printed: how many elements of sum differ from bf16(r + p16) (two roundings) and from
// bf16(r + p32) (one rounding), and how many of those two references differ from each other (the
// elements where the order of rounding matters at all). Inputs: pseudo-random values in [-1, 1)
// (products inexact in bf16), the stream scaled by `scale` against the product.
// Usage: cublas_beta_probe. Build and run on the GPU machine (repository root):
//   nvcc -O3 -std=c++20 -arch=sm_90a -I. -o /tmp/cublas_beta_probe tools/probes/cublas_beta_probe.cu \
//     -lcublas && /tmp/cublas_beta_probe
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tools/probes/probe_check.h"

namespace {

uint16_t bits(__nv_bfloat16 v) {
  uint16_t b;
  std::memcpy(&b, &v, 2);
  return b;
}

void run(cublasHandle_t h, int M, int N, int K, float scale) {
  const auto W = probe_random_bf16(size_t(N) * K, 1.0f / 16, 1 + N);
  const auto X = probe_random_bf16(size_t(M) * K, 1.0f, 2 + M);
  const auto R = probe_random_bf16(size_t(M) * N, scale, 3 + K);
  __nv_bfloat16* dW = upload(W);
  __nv_bfloat16* dX = upload(X);
  __nv_bfloat16* dR = upload(R);
  __nv_bfloat16* dP16 = upload(std::vector<__nv_bfloat16>(size_t(M) * N));
  float* dP32 = upload(std::vector<float>(size_t(M) * N));
  const float one = 1.0f, zero = 0.0f;
  // Row-major y [M, N] = x [M, K] W^T, as column-major y^T = W x^T (the library's gemm_xwt).
  auto gemm = [&](void* y, cudaDataType_t ty, const float* beta) {
    CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, dW, CUDA_R_16BF, K, dX, CUDA_R_16BF, K, beta, y, ty, N,
                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  gemm(dP16, CUDA_R_16BF, &zero);
  gemm(dP32, CUDA_R_32F, &zero);
  gemm(dR, CUDA_R_16BF, &one);
  CK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> p16(size_t(M) * N), sum(size_t(M) * N);
  std::vector<float> p32(size_t(M) * N);
  CK(cudaMemcpy(p16.data(), dP16, p16.size() * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(p32.data(), dP32, p32.size() * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(sum.data(), dR, sum.size() * 2, cudaMemcpyDeviceToHost));
  size_t vs_twice = 0, vs_once = 0, refs = 0;
  for (size_t i = 0; i < sum.size(); ++i) {
    const float r = __bfloat162float(R[i]);
    const uint16_t twice = bits(__float2bfloat16(r + __bfloat162float(p16[i])));
    const uint16_t once = bits(__float2bfloat16(r + p32[i]));
    vs_twice += bits(sum[i]) != twice;
    vs_once += bits(sum[i]) != once;
    refs += twice != once;
  }
  std::printf(
      "M %6d N %5d K %5d stream x%-4g: beta=1 differs from two roundings in %8zu, from one in %8zu; "
      "the references differ in %8zu of %zu\n",
      M, N, K, scale, vs_twice, vs_once, refs, sum.size());
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  probe_device_props(prop);
  int version = 0;
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasGetVersion(h, &version));
  std::printf("# %s, cuBLAS %d\n", prop.name, version);
  const int shapes[][3] = {
      {40, 768, 2048}, {48, 2560, 9216}, {1024, 2560, 9216}, {8192, 2560, 9216}, {8192, 5120, 17408}};
  for (const auto& s : shapes)
    for (float scale : {1.0f, 8.0f}) run(h, s[0], s[1], s[2], scale);
  CK(cublasDestroy(h));
  return 0;
}
