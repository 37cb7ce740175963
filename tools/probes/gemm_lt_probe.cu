// gemm_lt_probe.cu: the decode projections three ways. For each small-M shape y[M, N] = x[M, K]
// W[N, K]^T (bf16 in, f32 accumulate, bf16 out), times cublasGemmEx (the model step's default),
// the best of cuBLASLt's top heuristic algorithms, and variants of the skinny kernel
// (kernels/skinny_gemm.h: tensor-map copies; tools/probes/skinny_bulk.cuh: 1-D bulk copies;
// tools/probes/skinny_wgmma.cuh: the same ring multiplied by wgmma), each at its
// best split count and checked against cublasGemmEx, with CUDA graphs of 20 launches over 8
// rotating weight copies (so L2 cannot serve the weights), and prints each one's weight bandwidth.
// Shapes: the 4B preset's projections, then the 27B preset's (`27b.` names). For weights of at most
// 48 MB the last column times the library's kernel with its weights already in L2 (one copy,
// launched back to back): the bound on what prefetching them into L2 could buy.
// Usage: gemm_lt_probe [OP|all M [VARIANTS]] (one shape, e.g. `mlp.gate_up 32`, for ncu; `all 32
// tma64x8,x5`: every shape at 32 rows, the variants whose names hold "tma64x8" or "x5"). Build and run on the GPU
// machine (from the repository root):
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/gemm_lt_probe \
//     tools/probes/gemm_lt_probe.cu kernels/swiglu.cu kernels/skinny_gemm_shapes.cpp kernels/launch_policy.cpp \
//     kernels/launch_check.cpp -lcublasLt -lcublas &&
//   /tmp/gemm_lt_probe
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "kernels/skinny_gemm.cu"  // the kernel under test, compiled into the probe
#include "kernels/swiglu.h"
#include "tools/probes/skinny_bulk.cuh"   // a bulk-copy variant
#include "tools/probes/skinny_wgmma.cuh"  // a wgmma variant (sm_90a)

#include "tools/probes/gemm_probe.h"
#include "tools/probes/probe_check.h"

constexpr int kCopies = 8, kLaunches = 20;

int main(int argc, char** argv) {
  // Optional: one shape (or `all`) and row count (`gemm_lt_probe mlp.gate_up 32`), e.g. under ncu,
  // and the variants whose names contain one of comma-separated strings (`gemm_lt_probe all 32 x5,x8`).
  const char* only = argc >= 3 && std::string(argv[1]) != "all" ? argv[1] : nullptr;
  const int only_m = argc >= 3 ? std::atoi(argv[2]) : 0;
  const char* vfilter = argc >= 4 ? argv[3] : nullptr;
  struct Shape {
    const char* name;
    int N, K;
  };
  const Shape shapes[] = {{"gdn.in_proj", 12352, 2560},
                          {"gdn.out_proj", 2560, 4096},
                          {"mlp.gate_up", 18432, 2560},
                          {"mlp.down", 2560, 9216},
                          {"attn.qkv", 10240, 2560},
                          {"attn.o_proj", 2560, 4096},
                          // the 27B preset's
                          {"27b.gdn.in_proj", 16480, 5120},
                          {"27b.gdn.out_proj", 5120, 6144},
                          {"27b.mlp.gate_up", 34816, 5120},
                          {"27b.mlp.down", 5120, 17408},
                          {"27b.attn.qkv", 14336, 5120},
                          {"27b.attn.o_proj", 5120, 6144}};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  void* ws;
  const size_t ws_bytes = kProbeCublasWorkspace;
  const cublasHandle_t h = probe_cublas(s, &ws);
  cublasLtHandle_t lt;
  CK(cublasLtCreate(&lt));
  std::printf("%-14s %4s %7s %6s | %9s %6s | %9s %6s | %5s | %s\n", "op", "M", "N", "K", "gemmEx us", "TB/s",
              "best lt us", "TB/s", "algos", "skinny variant BKxstages/best splits: us (TB/s)");
  float* sk_ws;
  int32_t* sk_cnt;
  CK(cudaMalloc(&sk_ws, size_t(16) * 32 * 40000 * 4));  // splits x M x N partials
  CK(cudaMalloc(&sk_cnt, 4096 * 4));
  CK(cudaMemset(sk_cnt, 0, 4096 * 4));
  for (const Shape& sh : shapes) {
    if (only && std::string(only) != sh.name) continue;
    const size_t wb = size_t(sh.N) * sh.K * 2;
    const std::vector<void*> W = probe_weight_copies(sh.N, sh.K, kCopies, false);  // copy 0: the check's
    for (int M : {1, 8, 32}) {
      if (only_m && M != only_m) continue;
      void* x = probe_x(M, sh.K);
      void* y;
      CK(cudaMalloc(&y, size_t(M) * sh.N * 2));
      const float t0 = time_graph(s, kLaunches, kCopies, [&](int c) { gemm_ex(h, W[c], x, y, M, sh.N, sh.K); });
      const ProbeLtGemm ltg(lt, M, sh.N, sh.K, ws_bytes, 32);
      float best = 1e30f;
      int tried = 0, best_i = -1;
      for (int i = 0; i < ltg.count; ++i) {
        if (ltg.algos[i].state != CUBLAS_STATUS_SUCCESS) continue;
        ++tried;
        const float t = time_graph(s, kLaunches, kCopies, [&](int c) { ltg.run(i, W[c], x, y, ws, ws_bytes, s); });
        if (t < best) best = t, best_i = i;
      }
      // gate_up: SwiGLU after it (the swiglu kernel on y, W's rows interleaved in groups of 8), the
      // model's two-kernel form, against the skinny kernel's SwiGLU epilogue (the "+sw" variants).
      const bool gate_up = std::strstr(sh.name, "gate_up") != nullptr;
      void* act = nullptr;
      sg::SwigluParams sw;
      if (gate_up) {
        CK(cudaMalloc(&act, size_t(M) * sh.N));  // [M, N / 2] bf16
        sw.gu = y;
        sw.y = act;
        sw.T = M;
        sw.I = sh.N / 2;
        sw.interleave = 8;
      }
      std::printf("%-14s %4d %7d %6d | %9.2f %6.2f | %9.2f %6.2f | %5d |", sh.name, M, sh.N, sh.K, 1000 * t0,
                  wb / (t0 * 1e9), 1000 * best, wb / (best * 1e9), tried);
      if (gate_up && best_i >= 0) {
        const float tsw = time_graph(s, kLaunches, kCopies, [&](int c) {
          ltg.run(best_i, W[c], x, y, ws, ws_bytes, s);
          CK(sg::swiglu(sw, s));
        });
        std::printf(" lt+swiglu: %.2f (%.2f) |", 1000 * tsw, wb / (tsw * 1e9));
      }
      const int pick = sg::skinny_gemm_pick_splits(M, sh.N, sh.K, 132);
      // Tile variants (K per tile, ring stages): the best split count of each.
      struct Variant {
        const char* name;
        int bk;
        cudaError_t (*fn)(const sg::SkinnyGemmParams&, cudaStream_t);
      };
      // tmaBNxS: the library's tensor-map kernel with BN W rows a block and S stages (the library runs
      // 64 x 8, 128 x 5, 256 x 5); bulkBNxBKxS: 1-D bulk copies, one per row piece (slower, docs/BENCHMARKS.md).
      const Variant variants[] = {{"tma64x8", 64, sg::launch_tma<64, 8>},
                                  {"tma128x5", 64, sg::launch_tma<128, 5>},
                                  {"tma256x5", 64, sg::launch_tma<256, 5>},
                                  // one block an SM for N ~ 10240 .. 18432 (ceil(N / 132) rounded up to 16)
                                  {"tma80x5", 64, sg::launch_tma<80, 5>},
                                  {"tma96x5", 64, sg::launch_tma<96, 5>},
                                  {"tma144x5", 64, sg::launch_tma<144, 5>},
                                  // one block an SM for the 27B's gate_up (34816 = 128 x 272; two W boxes a stage)
                                  {"tma272x5", 64, sg::launch_tma<272, 5>},
                                  {"tma272x4", 64, sg::launch_tma<272, 4>},
                                  // ... and for its attn.qkv (14336 = 128 x 112)
                                  {"tma112x5", 64, sg::launch_tma<112, 5>},
                                  // with the SwiGLU epilogue (gate_up only: checked against the swiglu kernel on y)
                                  {"tma272x5+sw", 64, sg::launch_tma<272, 5>},
                                  {"tma256x5+sw", 64, sg::launch_tma<256, 5>},
                                  {"tma64x8+sw", 64, sg::launch_tma<64, 8>},
                                  {"tma64x16", 64, sg::launch_tma<64, 16>},
                                  {"tma64x12", 64, sg::launch_tma<64, 12>},
                                  {"bulk64x256x4", 256, sg::launch_bulk<64, 256, 4>},
                                  // wgmmaBNxS: the same on wgmma (skinny_wgmma.cuh)
                                  {"wgmma64x8", 64, sg::launch_wgmma_rows<64, 8>},
                                  {"wgmma128x5", 64, sg::launch_wgmma_rows<128, 5>},
                                  {"wgmma256x5", 64, sg::launch_wgmma_rows<256, 5>},
                                  {"wgmma64x12", 64, sg::launch_wgmma_rows<64, 12>},
                                  {"wgmma128x8", 64, sg::launch_wgmma_rows<128, 8>}};
      for (const Variant& v : variants) {
        const bool fused = std::strstr(v.name, "+sw") != nullptr;
        if (fused && !gate_up) continue;
        auto params = [&](void* w, int splits) {  // y = x w^T (or act), M x N x K, at `splits`
          sg::SkinnyGemmParams p = skinny_params(x, w, fused ? act : y, M, sh.N, sh.K, splits, sk_ws, sk_cnt);
          if (fused) p.swiglu_group = 8;
          return p;
        };
        if (vfilter && ![&] {  // any of the comma-separated substrings
              const std::string f = vfilter;
              for (size_t a = 0, b; a <= f.size(); a = b + 1) {
                b = std::min(f.find(',', a), f.size());
                if (b > a && std::strstr(v.name, f.substr(a, b - a).c_str())) return true;
              }
              return false;
            }())
          continue;
        float vbest = 1e30f;
        int vs = 0;
        for (int sp : {pick, 1, 2, 3, 4, 6, 8, 12, 16}) {
          if (sp > sh.K / v.bk) continue;
          const float t = time_graph(s, kLaunches, kCopies, [&](int c) { CK(v.fn(params(W[c], sp), s)); });
          if (t < vbest) vbest = t, vs = sp;
        }
        // Check: the variant's y on copy 0 against cublasGemmEx's (bf16 outputs, relative error); a
        // fused variant's act against the swiglu kernel on cublasGemmEx's y.
        void* out = fused ? act : y;
        const size_t outs = size_t(M) * (fused ? sh.N / 2 : sh.N);
        std::vector<uint16_t> got(outs), want(outs);
        gemm_ex(h, W[0], x, y, M, sh.N, sh.K);
        if (fused) CK(sg::swiglu(sw, s));
        CK(cudaStreamSynchronize(s));  // s does not synchronise with the legacy stream's copies
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(want.data(), out, want.size() * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemset(out, 0, got.size() * 2));
        CK(cudaDeviceSynchronize());
        CK(v.fn(params(W[0], vs), s));
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost));
        const double worst = max_rel_diff_bf16(got, want);  // the largest difference over the largest |y|
        std::printf(" %s/%d: %.2f (%.2f)%s", v.name, vs, 1000 * vbest, wb / (vbest * 1e9), worst < 1e-2 ? "" : " BAD");
      }
      // The library's kernel and split pick with its weights already in L2 (one copy, launched back
      // to back: from the second launch on W comes from L2 when it fits, about 50 MB): what a GEMM
      // would take if the weights were prefetched into L2 during the small kernels before it.
      if (wb <= (size_t{48} << 20)) {
        const float warm = time_graph(s, kLaunches, kCopies, [&](int) {
          CK(sg::skinny_gemm(skinny_params(x, W[0], y, M, sh.N, sh.K, pick, sk_ws, sk_cnt), s));
        });
        std::printf(" | L2-warm tma64x8/%d: %.2f (%.2f)", pick, 1000 * warm, wb / (warm * 1e9));
      }
      std::printf("\n");
      if (act) CK(cudaFree(act));
      CK(cudaFree(x));
      CK(cudaFree(y));
    }
    for (auto& w : W) CK(cudaFree(w));
  }
  return 0;
}
