// lt_f32_norm_probe.cu: a decode projection that feeds the residual stream (o_proj, out_proj, down:
// N = hidden) followed by the RMSNorm that adds it to the residual and normalises it (the library's
// rmsnorm, as the model step launches it), two ways:
//   bf16: cuBLASLt writes y in bf16 (split-K partials summed in f32 by its reduce kernel, as the
//         library's LtGemm allows), the norm reads bf16;
//   f32:  cuBLASLt writes y in f32, so a split-K algorithm may sum its partials in place in y (no
//         reduce kernel); the norm rounds y to bf16 first (the same arithmetic from there on);
// and, under programmatic dependent launch (as the model step launches them; cuBLASLt's kernels
// still start plainly, the norm after them programmatically):
//   bf16 pdl:    the bf16 side again;
//   skinny:      the library's skinny GEMM (its split pick, its last block summing the partials into
//                bf16 y), the norm reading y; its first weight tiles stream under the norm before it;
//   skinny fold: the skinny GEMM writing only its partials (defer_sum), the norm summing them
//                (x_splits): the same bytes of h as skinny, one split-K sum fewer on the chain.
// Each pair (GEMM + norm) is timed in CUDA graphs of 20 pairs over 8 rotating weight copies (L2
// cannot serve the weights), the best of cuBLASLt's heuristic algorithms for each side; printed:
// us a pair, the kernels a pair (graph nodes / 20), the chosen algorithm's split count and
// reduction scheme, and how many bytes of h differ from the bf16 side's (h of each side's best).
// Usage: lt_f32_norm_probe [M] (default 32). Build and run on the GPU machine (repository root):
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/lt_f32_norm_probe \
//     tools/probes/lt_f32_norm_probe.cu kernels/rmsnorm.cu kernels/skinny_gemm.cu kernels/skinny_gemm_shapes.cpp \
//     kernels/launch_check.cpp kernels/launch_policy.cpp -lcublasLt && /tmp/lt_f32_norm_probe 32
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/launch_policy.h"
#include "kernels/rmsnorm.h"
#include "kernels/skinny_gemm.h"
#include "tools/probes/gemm_probe.h"
#include "tools/probes/probe_check.h"

using namespace sg;

namespace {

constexpr int kCopies = 8, kLaunches = 20, kHidden = 2560;  // the 4B preset's hidden size

// The split count and reduction scheme of algorithm i.
std::string describe(const ProbeLtGemm& g, int i) {
  int split = 0;
  uint32_t scheme = 0;
  size_t n = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&g.algos[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof(split), &n);
  cublasLtMatmulAlgoConfigGetAttribute(&g.algos[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme, sizeof(scheme),
                                       &n);
  const char* sc = scheme == CUBLASLT_REDUCTION_SCHEME_INPLACE        ? "inplace"
                   : scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE ? "compute"
                   : scheme == CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE  ? "output"
                                                                      : "none";
  char b[64];
  std::snprintf(b, sizeof(b), "split %d %s", split, sc);
  return b;
}

// Kernel nodes of a graph of kLaunches pairs, a pair.
template <typename F>
double nodes_a_pair(cudaStream_t s, F body) {
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kLaunches; ++i) body(i % kCopies);
  CK(cudaStreamEndCapture(s, &g));
  size_t n = 0;
  CK(cudaGraphGetNodes(g, nullptr, &n));
  CK(cudaGraphDestroy(g));
  return static_cast<double>(n) / kLaunches;
}

}  // namespace

int main(int argc, char** argv) {
  const int M = argc > 1 ? std::atoi(argv[1]) : 32;
  cudaDeviceProp prop;
  const int sms = probe_device_props(prop);
  struct Shape {
    const char* name;
    int N, K;
  };
  const Shape shapes[] = {{"gdn.out_proj", kHidden, 4096}, {"mlp.down", kHidden, 9216}, {"attn.o_proj", kHidden, 4096}};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t wsb = size_t{32} << 20;
  void* ws;
  CK(cudaMalloc(&ws, wsb));
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  std::printf("M = %d; us a pair (GEMM + add-and-norm), kernels a pair, the best algorithm's split and scheme\n", M);
  for (const Shape& sh : shapes) {
    const int N = sh.N, K = sh.K;
    std::vector<void*> W(kCopies);
    const std::vector<__nv_bfloat16> w0 = probe_weights(N, K);
    for (int c = 0; c < kCopies; ++c) {
      CK(cudaMalloc(&W[c], size_t(N) * K * 2));
      CK(cudaMemcpy(W[c], w0.data(), size_t(N) * K * 2, cudaMemcpyHostToDevice));
    }
    const std::vector<__nv_bfloat16> xa = probe_activations(M, K), wn = probe_activations(1, N);
    void *x, *y16, *y32, *res, *res0, *h, *wnorm;
    CK(cudaMalloc(&x, size_t(M) * K * 2));
    CK(cudaMemcpy(x, xa.data(), size_t(M) * K * 2, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&y16, size_t(M) * N * 2));
    CK(cudaMalloc(&y32, size_t(M) * N * 4));
    CK(cudaMalloc(&res, size_t(M) * N * 2));
    CK(cudaMalloc(&res0, size_t(M) * N * 2));
    CK(cudaMalloc(&h, size_t(M) * N * 2));
    CK(cudaMalloc(&wnorm, size_t(N) * 2));
    CK(cudaMemcpy(wnorm, wn.data(), size_t(N) * 2, cudaMemcpyHostToDevice));
    const std::vector<__nv_bfloat16> r0 = probe_activations(M, N);
    CK(cudaMemcpy(res0, r0.data(), size_t(M) * N * 2, cudaMemcpyHostToDevice));
    struct Side {
      const char* name;
      cudaDataType yt;
      uint32_t schemes;
    };
    const Side sides[] = {
        {"bf16", CUDA_R_16BF, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE},
        {"f32", CUDA_R_32F, CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE},
        {"f32 inplace", CUDA_R_32F, CUBLASLT_REDUCTION_SCHEME_INPLACE}};
    // x = round(round(y) + res) into res, h = rmsnorm(x): the step's norm after the GEMM, reading a
    // bf16 y or an f32 one (rounded first).
    auto norm_params = [&](void* y, bool f32) {
      RmsNormParams np;
      np.x = y;
      np.x_dtype = f32 ? DType::f32 : DType::bf16;
      np.round_x = f32;
      np.residual = res;
      np.residual_out = res;
      np.w = wnorm;
      np.w_dtype = DType::bf16;
      np.y = h;
      np.T = M;
      np.n = N;
      return np;
    };
    std::vector<uint16_t> h_ref;
    for (const Side& side : sides) {
      const ProbeLtGemm g(lt, M, N, K, wsb, 32, side.yt, side.schemes);
      void* y = side.yt == CUDA_R_32F ? y32 : y16;
      RmsNormParams np = norm_params(y, side.yt == CUDA_R_32F);
      auto pair = [&](int i, int c) {
        g.run(i, W[c], x, y, ws, wsb, s);
        return rmsnorm(np, s) == cudaSuccess;
      };
      float best = 1e30f;
      int bi = -1;
      for (int i = 0; i < g.count; ++i) {
        if (g.algos[i].state != CUBLAS_STATUS_SUCCESS || !pair(i, 0)) {
          cudaGetLastError();
          continue;
        }
        CK(cudaStreamSynchronize(s));
        const float t = time_graph(s, kLaunches, kCopies, [&](int c) { pair(i, c); });
        if (t < best) best = t, bi = i;
      }
      if (bi < 0) {
        std::printf("%-13s %-12s no algorithm ran\n", sh.name, side.name);
        continue;
      }
      // h of one pair from the same residual, against the bf16 side's.
      CK(cudaMemcpy(res, res0, size_t(M) * N * 2, cudaMemcpyDeviceToDevice));
      pair(bi, 0);
      std::vector<uint16_t> hv(size_t(M) * N);
      CK(cudaMemcpy(hv.data(), h, hv.size() * 2, cudaMemcpyDeviceToHost));
      if (h_ref.empty()) h_ref = hv;
      size_t diff = 0;
      for (size_t i = 0; i < hv.size(); ++i) diff += hv[i] != h_ref[i];
      const double nodes = nodes_a_pair(s, [&](int c) { pair(bi, c); });
      std::printf("%-13s %-12s %8.2f us  %.1f kernels  %-18s  h bytes differing from bf16's: %zu of %zu (%d algos)\n",
                  sh.name, side.name, 1000 * best, nodes, describe(g, bi).c_str(), diff, hv.size(), g.count);
    }
    // Under PDL: cuBLASLt's bf16 side again, then the skinny kernel summing its partials itself or
    // leaving them to the norm.
    const PdlScope pdl(true);
    const int splits = skinny_gemm_pick_splits(M, N, K, sms);
    const size_t skinny_ws = std::max<size_t>(16, skinny_gemm_workspace_bytes(M, N, splits));
    void *sws, *cnt;
    CK(cudaMalloc(&sws, skinny_ws));
    CK(cudaMalloc(&cnt, size_t((N + 63) / 64) * 4));
    CK(cudaMemset(cnt, 0, size_t((N + 63) / 64) * 4));
    std::vector<uint16_t> h_skinny;
    const ProbeLtGemm g(lt, M, N, K, wsb, 32, CUDA_R_16BF, CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE);
    for (int form = 0; form < 3; ++form) {
      const char* name = form == 0 ? "bf16 pdl" : form == 1 ? "skinny" : "skinny fold";
      RmsNormParams np = norm_params(y16, false);
      SkinnyGemmParams sp =
          skinny_params(x, nullptr, y16, M, N, K, splits, static_cast<float*>(sws), static_cast<int32_t*>(cnt));
      sp.block_rows = skinny_gemm_block_rows(M, N, sms);
      if (form == 2) {
        sp.defer_sum = splits > 1;
        if (splits > 1) {
          np.x = sws;
          np.x_dtype = DType::f32;
          np.round_x = true;
          np.x_splits = splits;
          np.x_split_stride = int64_t{M} * N;
        }
      }
      int algo = 0;  // the bf16 side: its best algorithm, chosen as above
      auto pair = [&](int c) {
        if (form == 0) {
          g.run(algo, W[c], x, y16, ws, wsb, s);
        } else {
          sp.W = W[c];
          CK(skinny_gemm(sp, s));
        }
        CK(rmsnorm(np, s));
      };
      float best = 1e30f;
      int best_i = 0;
      for (int i = 0; i < (form == 0 ? g.count : 1); ++i) {
        if (form == 0 && g.algos[i].state != CUBLAS_STATUS_SUCCESS) continue;
        algo = i;
        const float t = time_graph(s, kLaunches, kCopies, pair);
        if (t < best) best = t, best_i = i;
      }
      algo = best_i;
      CK(cudaMemcpy(res, res0, size_t(M) * N * 2, cudaMemcpyDeviceToDevice));
      pair(0);
      CK(cudaStreamSynchronize(s));
      std::vector<uint16_t> hv(size_t(M) * N);
      CK(cudaMemcpy(hv.data(), h, hv.size() * 2, cudaMemcpyDeviceToHost));
      const std::vector<uint16_t>& cmp = form == 2 ? h_skinny : h_ref;
      if (form == 1) h_skinny = hv;
      size_t diff = 0;
      for (size_t i = 0; i < hv.size() && i < cmp.size(); ++i) diff += hv[i] != cmp[i];
      const double nodes = nodes_a_pair(s, pair);
      std::printf("%-13s %-12s %8.2f us  %.1f kernels  %-18s  h bytes differing from %s's: %zu of %zu\n", sh.name, name,
                  1000 * best, nodes,
                  form == 0 ? describe(g, best_i).c_str() : (std::string("splits ") + std::to_string(splits)).c_str(),
                  form == 2 ? "skinny" : "bf16", diff, hv.size());
    }
    CK(cudaFree(sws));
    CK(cudaFree(cnt));
    for (void* p : W) CK(cudaFree(p));
    for (void* p : {x, y16, y32, res, res0, h, wnorm}) CK(cudaFree(p));
  }
  return 0;
}
