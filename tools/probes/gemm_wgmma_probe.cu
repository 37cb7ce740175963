// gemm_wgmma_probe.cu: the prefill GEMMs by an own sm_90a kernel (tools/probes/gemm_wgmma.cuh)
// against cublasGemmEx, and gate_up with SwiGLU in that kernel's epilogue against cublasGemmEx
// followed by the library's swiglu kernel (kernels/swiglu.h, the model's prefill path). For each
// shape (the 4B preset's gate_up and down at M rows; the 27B's gate_up with --27b) it checks the
// own kernel's bytes against cuBLAS's (the probe's inputs are small multiples of 1/16 and 1/8, so
// every sum is exact in f32 and any correct order of accumulation gives the same bytes) and the
// fused SwiGLU's against the two-kernel path, then times graphs of 10 launches (median of five
// replays) and prints ms, TFLOP/s and the fraction of the card's bf16 peak (790 TFLOP/s on the
// H200) for: cuBLAS, the own kernel at each raster group width, the swiglu kernel, the fused form.
// Usage: gemm_wgmma_probe [M] [--27b] [--stages 3|4]. Build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/gemm_wgmma_probe \
//     tools/probes/gemm_wgmma_probe.cu kernels/swiglu.cu kernels/launch_policy.cpp kernels/launch_check.cpp \
//     -lcublas -lcuda && /tmp/gemm_wgmma_probe 32768
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/swiglu.h"
#include "tools/probes/gemm_probe.h"
#include "tools/probes/gemm_wgmma.cuh"
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
  std::printf("  %-34s %9.3f ms  %6.1f TFLOP/s  %5.1f%% of 790\n", what, ms, flop / (ms * 1e-3) / 1e12,
              100.0 * flop / (ms * 1e-3) / kPeak);
}

// One shape: y[M, N] = x[M, K] W[N, K]^T; `with_swiglu`: W is gate_up (rows interleaved in groups of 8).
template <int kStages>
bool run_shape(const char* name, int M, int N, int K, bool with_swiglu, cublasHandle_t h, cudaStream_t st, int sms) {
  using namespace sg;
  std::printf("%s: M %d, N %d, K %d, %d stages\n", name, M, N, K, kStages);
  const double flop = 2.0 * M * N * K;
  void* x = probe_x(M, K);
  void* w = probe_weight_copies(N, K, 1, true)[0];
  void *y_ref, *y_own;
  CK(cudaMalloc(&y_ref, size_t(M) * N * 2));
  CK(cudaMalloc(&y_own, size_t(M) * N * 2));
  bool ok = true;
  gemm_ex(h, w, x, y_ref, M, N, K);
  const std::vector<uint16_t> ref = download(y_ref, size_t(M) * N);
  // The own kernel's forms: (cluster, raster group width, 16-byte stores).
  // cluster 3: a pair launched as a cluster that shares nothing (Shape::multicast false), a control.
  const int forms[][3] = {{1, 4, 0}, {1, 4, 1}, {1, 8, 1}, {2, 4, 1}, {2, 16, 1}, {3, 4, 1}};
  const auto own = [&](const int* f, void* out, const probe_gemm::Shape& s) {
    using namespace probe_gemm;
    if (f[0] == 1)
      return f[2] ? gemm_tn<kStages, false, 1, true>(x, w, out, s, sms, st)
                  : gemm_tn<kStages, false, 1, false>(x, w, out, s, sms, st);
    return f[2] ? gemm_tn<kStages, false, 2, true>(x, w, out, s, sms, st)
                : gemm_tn<kStages, false, 2, false>(x, w, out, s, sms, st);
  };
  const auto own_sw = [&](int cluster, bool wide, void* out, const probe_gemm::Shape& s) {
    using namespace probe_gemm;
    if (cluster == 1)
      return wide ? gemm_tn<kStages, true, 1, true>(x, w, out, s, sms, st)
                  : gemm_tn<kStages, true, 1, false>(x, w, out, s, sms, st);
    return wide ? gemm_tn<kStages, true, 2, true>(x, w, out, s, sms, st)
                : gemm_tn<kStages, true, 2, false>(x, w, out, s, sms, st);
  };
  for (const auto& f : forms) {
    probe_gemm::Shape s{M, N, K, N, f[1], f[0] != 3};
    CK(cudaMemset(y_own, 0xff, size_t(M) * N * 2));
    CK(own(f, y_own, s));
    CK(cudaStreamSynchronize(st));
    const size_t bad = count_diff(download(y_own, size_t(M) * N), ref);
    if (bad) {
      std::printf("  own kernel, cluster %d, group %d, wide %d: %zu of %zu outputs differ from cuBLAS\n", f[0], f[1],
                  f[2], bad, size_t(M) * N);
      ok = false;
    }
  }
  const float ms_ref = time_graph(st, kLaunches, 1, [&](int) { gemm_ex(h, w, x, y_ref, M, N, K); });
  row("cublasGemmEx", ms_ref, flop);
  for (const auto& f : forms) {
    probe_gemm::Shape s{M, N, K, N, f[1], f[0] != 3};
    const float ms = time_graph(st, kLaunches, 1, [&](int) { CK(own(f, y_own, s)); });
    char label[64];
    std::snprintf(label, sizeof label, "own, %s, group %d, %s stores",
                  f[0] == 1   ? "one block"
                  : f[0] == 2 ? "pair, shared W"
                              : "pair, no sharing",
                  f[1], f[2] ? "16 B" : "4 B");
    row(label, ms, flop);
  }
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
    // The raster group each form timed fastest at in the plain GEMM: 4 for one block, 16 for pairs.
    const auto shape_for = [&](int cluster) { return probe_gemm::Shape{M, N, K, I, cluster == 1 ? 4 : 16}; };
    for (int form = 0; form < 4; ++form) {
      const int cluster = 1 + form / 2;
      const bool wide = form % 2;
      CK(cudaMemset(act_own, 0xff, size_t(M) * I * 2));
      CK(own_sw(cluster, wide, act_own, shape_for(cluster)));
      CK(cudaStreamSynchronize(st));
      const size_t bad = count_diff(download(act_own, size_t(M) * I), download(act_ref, size_t(M) * I));
      if (bad) {
        std::printf("  fused SwiGLU, cluster %d, wide %d: %zu of %zu outputs differ from cuBLAS + swiglu\n", cluster,
                    int(wide), bad, size_t(M) * I);
        ok = false;
      }
    }
    const float ms_sw = time_graph(st, kLaunches, 1, [&](int) { CK(swiglu(sp, st)); });
    std::printf("  %-34s %9.3f ms  (%.0f%% of its bytes' floor at 4.3 TB/s)\n", "swiglu kernel", ms_sw,
                100.0 * (3.0 * M * I * 2 / 4.3e12) / (ms_sw * 1e-3));
    float ms_fused = 0;
    for (int form = 0; form < 4; ++form) {
      const int cluster = 1 + form / 2;
      const bool wide = form % 2;
      const float ms =
          time_graph(st, kLaunches, 1, [&](int) { CK(own_sw(cluster, wide, act_own, shape_for(cluster))); });
      char label[64];
      std::snprintf(label, sizeof label, "own + SwiGLU, cluster %d, %s stores", cluster, wide ? "16 B" : "4 B");
      row(label, ms, flop);
      ms_fused = form == 0 || ms < ms_fused ? ms : ms_fused;
    }
    std::printf("  cuBLAS + swiglu %.3f ms, fused (the faster) %.3f ms: %+.1f%%\n", ms_ref + ms_sw, ms_fused,
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
  int M = 32768, stages = 4;
  bool big = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--27b")) {
      big = true;
    } else if (!std::strcmp(argv[i], "--stages") && i + 1 < argc) {
      stages = std::atoi(argv[++i]);
    } else if (std::atoi(argv[i]) > 0) {
      M = std::atoi(argv[i]);
    } else {
      std::fprintf(stderr, "usage: gemm_wgmma_probe [M] [--27b] [--stages 3|4]\n");
      return 2;
    }
  }
  if (stages != 3 && stages != 4) {
    std::fprintf(stderr, "gemm_wgmma_probe: --stages must be 3 or 4\n");
    return 2;
  }
  cudaDeviceProp prop;
  const int sms = probe_device_props(prop);
  std::printf("gemm_wgmma_probe: %s, %d SMs\n", prop.name, sms);
  {  // how many pairs fit at once (the paired form's persistent grid)
    int clusters = 0;
    CK((sg::probe_gemm::max_clusters<4, false, 2, true>(sms / 2 * 2, clusters)));
    std::printf("  pairs of 4-stage blocks that fit at once: %d (%d blocks)\n", clusters, 2 * clusters);
  }
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  cublasHandle_t h = probe_cublas(st);
  const int H = big ? 5120 : 2560, I = big ? 17408 : 9216;
  bool ok = true;
  const auto shape = [&](const char* name, int N, int K, bool sw) {
    ok &= stages == 3 ? run_shape<3>(name, M, N, K, sw, h, st, sms) : run_shape<4>(name, M, N, K, sw, h, st, sms);
  };
  shape(big ? "27b mlp.gate_up" : "mlp.gate_up", 2 * I, H, true);
  shape(big ? "27b mlp.down" : "mlp.down", H, I, false);
  return ok ? 0 : 1;
}
