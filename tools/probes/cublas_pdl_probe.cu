// cublas_pdl_probe.cu: can a cuBLAS projection in a captured decode step start before the kernel
// before it has finished (programmatic dependent launch), as the step's own kernels do? cuBLAS
// launches its kernels itself, so a step cannot ask for PDL at the launch; a captured graph's edge
// into the GEMM's kernel node can be made programmatic afterwards (cudaGraphAddDependencies with
// cudaGraphDependencyTypeProgrammatic from cudaGraphKernelNodePortProgrammatic). That is safe only
// if the library's kernel waits for its dependency (griddepcontrol.wait) before it reads x, which
// no cuBLAS document promises. This probe finds out by running it: each pair is a stand-in for the
// kernel before the GEMM (every block lets the next kernel launch at its start, then waits D us,
// then writes x = v, a new v each pair) and a GEMM y = x W^T (cublasGemmEx, or cuBLASLt with its
// first heuristic algorithm) into the pair's own y, over 8 rotating weight copies, 8 pairs a graph.
// Each graph is timed with its edges as captured and with the stand-in -> GEMM edges made
// programmatic, and every pair's y is checked against v * rowsum(W): a GEMM that read x before
// the stand-in wrote it holds the previous pair's v (off by 1 / v, at least 12%).
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/cublas_pdl_probe \
//     tools/probes/cublas_pdl_probe.cu -lcublasLt -lcublas && /tmp/cublas_pdl_probe [M]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tools/probes/gemm_probe.h"
#include "tools/probes/probe_check.h"

namespace {

constexpr int kPairs = 8;  // one weight copy and one v a pair; v = pair + 1

__global__ void standin_kernel(__nv_bfloat16* x, int n, float v, uint64_t wait_ns) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < wait_ns);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) x[i] = __float2bfloat16(v);
}

// Every edge from a stand-in kernel node into another kernel node made programmatic; returns how
// many.
int make_programmatic(cudaGraph_t g) {
  size_t n = 0;
  CK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &n));
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  CK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &n));
  auto is_kernel = [](cudaGraphNode_t node) {
    cudaGraphNodeType t;
    CK(cudaGraphNodeGetType(node, &t));
    return t == cudaGraphNodeTypeKernel;
  };
  auto is_standin = [&](cudaGraphNode_t node) {
    if (!is_kernel(node)) return false;
    cudaKernelNodeParams p{};
    // A library's kernel node (another module) may not report runtime parameters: not a stand-in.
    if (cudaGraphKernelNodeGetParams(node, &p) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return p.func == reinterpret_cast<void*>(standin_kernel);
  };
  int made = 0;
  for (size_t e = 0; e < n; ++e) {
    if (!is_standin(from[e]) || !is_kernel(to[e]) || is_standin(to[e])) continue;
    CK(cudaGraphRemoveDependencies(g, &from[e], &to[e], &data[e], 1));
    cudaGraphEdgeData pdl{};
    pdl.from_port = cudaGraphKernelNodePortProgrammatic;
    pdl.type = cudaGraphDependencyTypeProgrammatic;
    CK(cudaGraphAddDependencies(g, &from[e], &to[e], &pdl, 1));
    ++made;
  }
  return made;
}

struct Shape {
  const char* name;
  int N, K;
};

}  // namespace

int main(int argc, char** argv) {
  const int M = argc >= 2 ? std::atoi(argv[1]) : 32;
  const Shape shapes[] = {{"gdn.out_proj", 2560, 4096},
                          {"mlp.down", 2560, 9216},
                          {"mlp.gate_up", 18432, 2560},
                          {"27b.gdn.out_proj", 5120, 6144},
                          {"27b.mlp.gate_up", 34816, 5120}};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* ws = nullptr;
  const cublasHandle_t h = probe_cublas(s, &ws);
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  std::printf("M = %d; us a pair (stand-in of D us + GEMM), %d pairs a graph; bad = pairs whose y is off\n", M, kPairs);
  std::printf("%-17s %-5s %4s | %9s %9s | %s\n", "op", "gemm", "D", "captured", "PDL edge", "edges made, bad pairs");
  for (const Shape& sh : shapes) {
    const auto wh = probe_weights(sh.N, sh.K);
    std::vector<double> rowsum(sh.N, 0.0);
    for (int n = 0; n < sh.N; ++n)
      for (int k = 0; k < sh.K; ++k) rowsum[n] += double(__bfloat162float(wh[size_t(n) * sh.K + k]));
    std::vector<void*> W(kPairs), Y(kPairs);
    for (int c = 0; c < kPairs; ++c) {
      W[c] = upload(wh);
      CK(cudaMalloc(&Y[c], size_t(M) * sh.N * 2));
    }
    __nv_bfloat16* x;
    CK(cudaMalloc(&x, size_t(M) * sh.K * 2));
    CK(cudaMemset(x, 0, size_t(M) * sh.K * 2));
    // cuBLASLt with its first heuristic algorithm.
    const ProbeLtGemm ltg(lt, M, sh.N, sh.K, kProbeCublasWorkspace, 1);
    for (int use_lt = 0; use_lt < 2; ++use_lt) {
      if (use_lt && ltg.count < 1) continue;
      for (uint64_t wait_us : {3, 30}) {
        float t[2] = {0, 0};
        int made = 0, bad = 0;
        for (int pdl = 0; pdl < 2; ++pdl) {
          cudaGraph_t g;
          cudaGraphExec_t ge;
          CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
          for (int c = 0; c < kPairs; ++c) {
            standin_kernel<<<132, 256, 0, s>>>(x, M * sh.K, float(c + 1), wait_us * 1000);
            CK(cudaGetLastError());
            if (use_lt) {
              ltg.run(0, W[c], x, Y[c], ws, kProbeCublasWorkspace, s);
            } else {
              gemm_ex(h, W[c], x, Y[c], M, sh.N, sh.K);
            }
          }
          CK(cudaStreamEndCapture(s, &g));
          if (pdl) made = make_programmatic(g);
          CK(cudaGraphInstantiate(&ge, g, 0));
          CK(cudaGraphLaunch(ge, s));
          cudaEvent_t a, b;
          CK(cudaEventCreate(&a));
          CK(cudaEventCreate(&b));
          std::vector<float> ms;
          for (int r = 0; r < 5; ++r) {
            for (int c = 0; c < kPairs; ++c) CK(cudaMemsetAsync(Y[c], 0xFF, size_t(M) * sh.N * 2, s));  // NaN
            CK(cudaEventRecord(a, s));
            CK(cudaGraphLaunch(ge, s));
            CK(cudaEventRecord(b, s));
            CK(cudaEventSynchronize(b));
            float e;
            CK(cudaEventElapsedTime(&e, a, b));
            ms.push_back(1000 * e / kPairs);
            // Every pair of this replay: y[m][n] = (c + 1) rowsum[n] within bf16 rounding.
            for (int c = 0; c < kPairs; ++c) {
              std::vector<__nv_bfloat16> y(size_t(M) * sh.N);
              CK(cudaMemcpy(y.data(), Y[c], y.size() * 2, cudaMemcpyDeviceToHost));
              bool off = false;
              for (size_t i = 0; i < y.size() && !off; ++i) {
                const double want = (c + 1) * rowsum[i % sh.N], got = __bfloat162float(y[i]);
                off = !(std::fabs(got - want) <= 1e-2 * std::fabs(want) + 1e-2);
              }
              bad += pdl && off;
              if (!pdl && off) std::printf("  (the captured graph's pair %d is off: the check itself is wrong)\n", c);
            }
          }
          std::sort(ms.begin(), ms.end());
          t[pdl] = ms[2];
          CK(cudaEventDestroy(a));
          CK(cudaEventDestroy(b));
          CK(cudaGraphExecDestroy(ge));
          CK(cudaGraphDestroy(g));
        }
        std::printf("%-17s %-5s %4d | %9.2f %9.2f | %d edges, %d of %d pairs off\n", sh.name, use_lt ? "lt" : "ex",
                    int(wait_us), t[0], t[1], made, bad, 5 * kPairs);
      }
    }
    CK(cudaFree(x));
    for (int c = 0; c < kPairs; ++c) {
      CK(cudaFree(W[c]));
      CK(cudaFree(Y[c]));
    }
  }
  return 0;
}
