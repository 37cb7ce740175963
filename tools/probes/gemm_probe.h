// gemm_probe.h: what the GEMM probes share: a cuBLAS handle on a stream with its workspace,
// y = x W^T by cublasGemmEx (bf16 in and out, f32 accumulation: the reference their variants are
// checked against), and the skinny kernel's parameters for one shape. For the hand-built probes of
// tools/probes/ only.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <vector>

#include "kernels/skinny_gemm.h"
#include "tools/probes/probe_check.h"

constexpr size_t kProbeCublasWorkspace = size_t{32} << 20;

// A handle on stream s with a kProbeCublasWorkspace workspace (kept until the probe exits), which
// *workspace receives when asked for.
inline cublasHandle_t probe_cublas(cudaStream_t s, void** workspace = nullptr) {
  cublasHandle_t h;
  CK(cublasCreate(&h));
  CK(cublasSetStream(h, s));
  void* ws;
  CK(cudaMalloc(&ws, kProbeCublasWorkspace));
  CK(cublasSetWorkspace(h, ws, kProbeCublasWorkspace));
  if (workspace) *workspace = ws;
  return h;
}

// y[M, N] = x[M, K] W[N, K]^T, all bf16, on h's stream.
inline void gemm_ex(cublasHandle_t h, const void* W, const void* x, void* y, int M, int N, int K) {
  const float alpha = 1, beta = 0;
  CK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, W, CUDA_R_16BF, K, x, CUDA_R_16BF, K, &beta, y,
                  CUDA_R_16BF, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// `copies` device copies of the [N, K] probe weights (rotated through by time_graph, so L2 cannot
// serve them from one launch to the next): copy 0 holds probe_weights(N, K), the variants' check;
// the others the same values (all_checked) or a finite, non-zero filler (bf16 bytes 0x3c3c, about
// 0.012), which times the same and costs no host copy. Freed by the caller.
inline std::vector<void*> probe_weight_copies(int N, int K, int copies, bool all_checked) {
  const size_t bytes = size_t(N) * K * 2;
  const std::vector<__nv_bfloat16> w = probe_weights(N, K);
  std::vector<void*> out(static_cast<size_t>(copies));
  for (size_t c = 0; c < out.size(); ++c) {
    CK(cudaMalloc(&out[c], bytes));
    if (c == 0 || all_checked) {
      CK(cudaMemcpy(out[c], w.data(), bytes, cudaMemcpyHostToDevice));
    } else {
      CK(cudaMemset(out[c], 0x3c, bytes));
    }
  }
  return out;
}

// A device copy of the [M, K] probe activations. Freed by the caller.
inline void* probe_x(int M, int K) {
  void* x = nullptr;
  CK(cudaMalloc(&x, size_t(M) * K * 2));
  CK(cudaMemcpy(x, probe_activations(M, K).data(), size_t(M) * K * 2, cudaMemcpyHostToDevice));
  return x;
}

// y^T [N, M] = W [N, K] x^T by cuBLASLt (bf16 in, y of type yt, f32 accumulation): the descriptors
// of one shape and up to `want` (at most 32) of the heuristic's algorithms for a workspace of
// ws_bytes (and, where `schemes` is not 0, those split-K reduction schemes only).
struct ProbeLtGemm {
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatmulHeuristicResult_t algos[32];  // the first `count` are set
  int count = 0;
  ProbeLtGemm(cublasLtHandle_t handle, int M, int N, int K, size_t ws_bytes, int want, cudaDataType yt = CUDA_R_16BF,
              uint32_t schemes = 0)
      : lt(handle) {
    CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K));
    CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K));
    CK(cublasLtMatrixLayoutCreate(&lc, yt, N, M, N));
    cublasLtMatmulPreference_t pref;
    CK(cublasLtMatmulPreferenceCreate(&pref));
    CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                            sizeof(ws_bytes)));
    if (schemes != 0) {
      CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
                                              sizeof(schemes)));
    }
    CK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, want < 32 ? want : 32, algos, &count));
    cublasLtMatmulPreferenceDestroy(pref);
  }
  ProbeLtGemm(const ProbeLtGemm&) = delete;
  ProbeLtGemm& operator=(const ProbeLtGemm&) = delete;
  ~ProbeLtGemm() {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
  }
  // y = x W^T with algorithm i, on stream s.
  void run(int i, const void* W, const void* x, void* y, void* ws, size_t ws_bytes, cudaStream_t s) const {
    const float alpha = 1, beta = 0;
    CK(cublasLtMatmul(lt, op, &alpha, W, la, x, lb, &beta, y, lc, y, lc, &algos[i].algo, ws, ws_bytes, s));
  }
};

// The skinny kernel's parameters for y = x W^T at `splits`, with the split partials' workspace and
// counters.
inline sg::SkinnyGemmParams skinny_params(const void* x, const void* W, void* y, int M, int N, int K, int splits,
                                          float* workspace, int32_t* counters) {
  sg::SkinnyGemmParams p;
  p.x = x;
  p.W = W;
  p.y = y;
  p.M = M;
  p.N = N;
  p.K = K;
  p.splits = splits;
  p.workspace = workspace;
  p.counters = counters;
  return p;
}
