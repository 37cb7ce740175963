// gemm_wgmma_probe.cu: the prefill GEMMs by the library's own sm_90a kernel (kernels/gemm_wgmma.h)
// against cublasGemmEx, and gate_up with SwiGLU in that kernel's epilogue against cublasGemmEx
// followed by the library's swiglu kernel (kernels/swiglu.h, the model's prefill path). For each
// shape (the 4B preset's gate_up, down and GDN in_proj at M rows, any M; the 27B's with --27b;
// in_proj's N is no multiple of the 256-column tile, an M that is no multiple of 256 gives the
// pairs a last tile past M) it checks the own kernel's bytes against cuBLAS's (the probe's inputs
// are small multiples of 1/16 and 1/8, so every sum is exact in f32 and any correct order of
// accumulation gives the same bytes) and the fused SwiGLU's against the two-kernel path, then times
// graphs of 10 launches (median of five replays) and prints ms, TFLOP/s and the fraction of the
// card's bf16 peak (790 TFLOP/s on the H200) for cuBLAS, the own kernel, the swiglu kernel and the
// fused form. The forms the kernel was chosen from (one block a tile, stores at the end of each tile,
// a staged epilogue drained by the producer's spare warps) are in docs/BENCHMARKS.md.
// Usage: gemm_wgmma_probe [M] [--27b] [--shape gate_up|down|in_proj]. Build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -fmad=false -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/gemm_wgmma_probe \
//     tools/probes/gemm_wgmma_probe.cu kernels/gemm_wgmma.cu kernels/swiglu.cu kernels/launch_policy.cpp \
//     kernels/launch_check.cpp -lcublas && /tmp/gemm_wgmma_probe 32768
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/gemm_wgmma.h"
#include "kernels/launch_check.h"
#include "kernels/swiglu.h"
#include "tools/probes/gemm_probe.h"
#include "tools/probes/probe_check.h"

namespace {

constexpr int kLaunches = 10;
constexpr double kPeak = 790e12;  // the H200's measured bf16 GEMM rate

std::vector<uint16_t> download(const void* d, size_t n) {
  std::vector<uint16_t> h(n);
  CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

size_t count_diff(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

void row(const char* what, float ms, double flop) {
  std::printf("  %-44s %9.3f ms  %6.1f TFLOP/s  %5.1f%% of 790\n", what, ms, flop / (ms * 1e-3) / 1e12,
              100.0 * flop / (ms * 1e-3) / kPeak);
}

// The library's kernel: y = x W^T, or with SwiGLU act of W's interleaved gate_up rows.
cudaError_t own(const void* x, const void* w, void* out, int M, int N, int K, bool with_swiglu, int sms,
                cudaStream_t st) {
  sg::GemmWgmmaParams p;
  p.x = x;
  p.W = w;
  p.y = out;
  p.M = M;
  p.N = N;
  p.K = K;
  p.swiglu_group = with_swiglu ? 8 : 0;
  p.sms = sms;
  const cudaError_t e = sg::gemm_wgmma(p, st);
  if (e != cudaSuccess) std::fprintf(stderr, "gemm_wgmma: %s\n", sg::take_launch_refusal().c_str());
  return e;
}

// One shape: y[M, N] = x[M, K] W[N, K]^T; `with_swiglu`: W is gate_up (rows interleaved in groups
// of 8) and the fused form runs too.
bool run_shape(const char* name, int M, int N, int K, bool with_swiglu, cublasHandle_t h, cudaStream_t st, int sms) {
  using namespace sg;
  std::printf("%s: M %d, N %d, K %d\n", name, M, N, K);
  const double flop = 2.0 * M * N * K;
  void* x = probe_x(M, K);
  void* w = probe_weight_copies(N, K, 1, true)[0];
  void *y_ref, *y_own;
  CK(cudaMalloc(&y_ref, size_t(M) * N * 2));
  CK(cudaMalloc(&y_own, size_t(M) * N * 2));
  bool ok = true;
  const auto check = [&](const char* what, void* out, size_t n, const std::vector<uint16_t>& want) {
    CK(cudaStreamSynchronize(st));
    const size_t bad = count_diff(download(out, n), want);
    if (bad) {
      std::printf("  %s: %zu of %zu outputs differ\n", what, bad, n);
      ok = false;
    }
  };
  gemm_ex(h, w, x, y_ref, M, N, K);
  CK(cudaMemset(y_own, 0xff, size_t(M) * N * 2));
  CK(own(x, w, y_own, M, N, K, false, sms, st));
  check("own GEMM against cuBLAS", y_own, size_t(M) * N, download(y_ref, size_t(M) * N));
  const float ms_ref = time_graph(st, kLaunches, 1, [&](int) { gemm_ex(h, w, x, y_ref, M, N, K); });
  row("cublasGemmEx", ms_ref, flop);
  const float ms_own = time_graph(st, kLaunches, 1, [&](int) { CK(own(x, w, y_own, M, N, K, false, sms, st)); });
  row("gemm_wgmma", ms_own, flop);
  std::printf("  gemm_wgmma against cuBLAS: %+.1f%%\n", 100.0 * (ms_own - ms_ref) / ms_ref);
  if (with_swiglu) {
    const int I = N / 2;
    void *act_ref, *act_own;
    CK(cudaMalloc(&act_ref, size_t(M) * I * 2));
    CK(cudaMalloc(&act_own, size_t(M) * I * 2));
    SwigluParams sp;
    sp.gu = y_ref;
    sp.y = act_ref;
    sp.T = M;
    sp.I = I;
    sp.interleave = 8;
    CK(swiglu(sp, st));
    CK(cudaMemset(act_own, 0xff, size_t(M) * I * 2));
    CK(own(x, w, act_own, M, N, K, true, sms, st));
    check("SwiGLU epilogue against cuBLAS + swiglu", act_own, size_t(M) * I, download(act_ref, size_t(M) * I));
    const float ms_sw = time_graph(st, kLaunches, 1, [&](int) { CK(swiglu(sp, st)); });
    std::printf("  %-44s %9.3f ms  (%.0f%% of its bytes' floor at 4.3 TB/s)\n", "swiglu kernel", ms_sw,
                100.0 * (3.0 * M * I * 2 / 4.3e12) / (ms_sw * 1e-3));
    const float ms_fused = time_graph(st, kLaunches, 1, [&](int) { CK(own(x, w, act_own, M, N, K, true, sms, st)); });
    row("gemm_wgmma +SwiGLU", ms_fused, flop);
    std::printf("  cuBLAS + swiglu %.3f ms, gemm_wgmma +SwiGLU %.3f ms: %+.1f%%\n", ms_ref + ms_sw, ms_fused,
                100.0 * (ms_fused - (ms_ref + ms_sw)) / (ms_ref + ms_sw));
    CK(cudaFree(act_ref));
    CK(cudaFree(act_own));
  }
  std::printf("  bytes: %s\n", ok ? "every own output equals cuBLAS's (and the two-kernel SwiGLU's)" : "MISMATCH");
  CK(cudaFree(x));
  CK(cudaFree(w));
  CK(cudaFree(y_ref));
  CK(cudaFree(y_own));
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int M = 32768;
  bool big = false;
  const char* only_shape = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--27b")) {
      big = true;
    } else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) {
      only_shape = argv[++i];
    } else if (std::atoi(argv[i]) > 0) {
      M = std::atoi(argv[i]);
    } else {
      std::fprintf(stderr, "usage: gemm_wgmma_probe [M] [--27b] [--shape gate_up|down|in_proj]\n");
      return 2;
    }
  }
  if (only_shape && std::strcmp(only_shape, "gate_up") && std::strcmp(only_shape, "down") &&
      std::strcmp(only_shape, "in_proj")) {
    std::fprintf(stderr, "gemm_wgmma_probe: --shape is gate_up, down or in_proj, not '%s'\n", only_shape);
    return 2;
  }
  cudaDeviceProp prop;
  const int sms = probe_device_props(prop);
  std::printf("gemm_wgmma_probe: %s, %d SMs\n", prop.name, sms);
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cublasHandle_t h = probe_cublas(st);
  const int H = big ? 5120 : 2560, I = big ? 17408 : 9216;
  bool ok = true;
  const auto shape = [&](const char* which, const char* name, int N, int K, bool sw) {
    if (!only_shape || !std::strcmp(only_shape, which)) ok &= run_shape(name, M, N, K, sw, h, st, sms);
  };
  shape("gate_up", big ? "27b mlp.gate_up" : "mlp.gate_up", 2 * I, H, true);
  shape("down", big ? "27b mlp.down" : "mlp.down", H, I, false);
  // q | k | v | z | b | a: 2 Hk Dk + 2 Hv Dv + 2 Hv (4B: Hk 16, Hv 32; 27B: Hk 16, Hv 48; D 128)
  shape("in_proj", big ? "27b gdn.in_proj" : "gdn.in_proj", big ? 16480 : 12352, H, false);
  return ok ? 0 : 1;
}
