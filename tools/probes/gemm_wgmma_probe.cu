// gemm_wgmma_probe.cu: the prefill GEMMs by an own sm_90a kernel (tools/probes/gemm_wgmma.cuh)
// against cublasGemmEx, and gate_up with SwiGLU in that kernel's epilogue against cublasGemmEx
// followed by the library's swiglu kernel (kernels/swiglu.h, the model's prefill path). For each
// shape (the 4B preset's gate_up, down and GDN in_proj at M rows, any M; the 27B's with --27b;
// in_proj's N is no multiple of the 256-column tile, an M that is no multiple of 256 gives the
// pairs a last tile past M) it checks the
// own kernel's bytes against cuBLAS's (the probe's inputs are small multiples of 1/16 and 1/8, so
// every sum is exact in f32 and any correct order of accumulation gives the same bytes) and the
// fused SwiGLU's against the two-kernel path, then times graphs of 10 launches (median of five
// replays) and prints ms, TFLOP/s and the fraction of the card's bf16 peak (790 TFLOP/s on the
// H200) for: cuBLAS, the own kernel in each form (one block or pairs sharing the W tile, the
// epilogue's stores, the raster group), the swiglu kernel, the fused forms (the consumers computing
// SwiGLU, the epilogue warps computing it from a staged tile while the consumers go on, or the
// consumers computing it for the last tile between the next tile's stages: "deferred stores").
// Usage: gemm_wgmma_probe [M] [--27b] [--shape gate_up|down|in_proj] [--only TEXT] (the forms whose printed
// name holds TEXT, e.g. --only "pair, group 16, staged" under ncu -k regex:gemm_tn_kernel -c 1; the
// fused forms' names begin "+SwiGLU: "). Build and run on the GPU machine:
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/gemm_wgmma_probe \
//     tools/probes/gemm_wgmma_probe.cu kernels/swiglu.cu kernels/launch_policy.cpp kernels/launch_check.cpp \
//     -lcublas && /tmp/gemm_wgmma_probe 32768
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
const char* g_only = nullptr;     // --only: the forms whose name holds this text (cuBLAS always runs)
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

// The own kernel in one form: W rows sharing (cluster 1: one block; 2: pairs sharing the W tile;
// 3: pairs launched as a cluster sharing nothing, Shape::multicast false), epilogue `epi`
// (probe_gemm::kEpi*; the staged form on 3 stages, the others on 4), raster group `group`.
struct Form {
  int cluster, epi, group;
  const char* name() const {
    static char buf[96];
    std::snprintf(buf, sizeof buf, "%s, group %d, %s",
                  cluster == 1   ? "one block"
                  : cluster == 2 ? "pair"
                                 : "pair apart",
                  group,
                  epi == 0   ? "4 B stores"
                  : epi == 1 ? "16 B stores"
                  : epi == 2 ? "staged epilogue"
                             : "deferred stores");
    return buf;
  }
};

template <bool kSwiglu>
cudaError_t run_form(const Form& f, const void* x, const void* w, void* out, int M, int N, int K, int sms,
                     cudaStream_t st) {
  using namespace sg::probe_gemm;
  const Shape s{M, N, K, kSwiglu ? N / 2 : N, f.group, f.cluster != 3};
  const bool pair = f.cluster != 1;
  switch (f.epi) {
    case kEpiPairs:
      return pair ? gemm_tn<4, kSwiglu, 2, kEpiPairs>(x, w, out, s, sms, st)
                  : gemm_tn<4, kSwiglu, 1, kEpiPairs>(x, w, out, s, sms, st);
    case kEpiWide:
      return pair ? gemm_tn<4, kSwiglu, 2, kEpiWide>(x, w, out, s, sms, st)
                  : gemm_tn<4, kSwiglu, 1, kEpiWide>(x, w, out, s, sms, st);
    case kEpiStaged:
      return pair ? gemm_tn<3, kSwiglu, 2, kEpiStaged>(x, w, out, s, sms, st)
                  : gemm_tn<3, kSwiglu, 1, kEpiStaged>(x, w, out, s, sms, st);
    default:
      return pair ? gemm_tn<4, kSwiglu, 2, kEpiDeferred>(x, w, out, s, sms, st)
                  : gemm_tn<4, kSwiglu, 1, kEpiDeferred>(x, w, out, s, sms, st);
  }
}

// One shape: y[M, N] = x[M, K] W[N, K]^T; `with_swiglu`: W is gate_up (rows interleaved in groups
// of 8) and the fused forms run too.
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
  const auto check = [&](const char* what, const Form& f, void* out, size_t n, const std::vector<uint16_t>& want) {
    CK(cudaStreamSynchronize(st));
    const size_t bad = count_diff(download(out, n), want);
    if (bad) {
      std::printf("  %s, %s: %zu of %zu outputs differ\n", what, f.name(), bad, n);
      ok = false;
    }
  };
  gemm_ex(h, w, x, y_ref, M, N, K);
  const std::vector<uint16_t> ref = download(y_ref, size_t(M) * N);
  const Form forms[] = {{1, 1, 4}, {1, 2, 4}, {2, 1, 16}, {2, 2, 16}, {2, 2, 4}, {2, 3, 16}};
  const auto picked = [](const Form& f, const char* prefix = "") {
    if (!g_only) return true;
    const std::string name = std::string(prefix) + f.name();
    return name.find(g_only) != std::string::npos;
  };
  for (const Form& f : forms) {
    if (!picked(f)) continue;
    CK(cudaMemset(y_own, 0xff, size_t(M) * N * 2));
    CK(run_form<false>(f, x, w, y_own, M, N, K, sms, st));
    check("own GEMM against cuBLAS", f, y_own, size_t(M) * N, ref);
  }
  const float ms_ref = time_graph(st, kLaunches, 1, [&](int) { gemm_ex(h, w, x, y_ref, M, N, K); });
  row("cublasGemmEx", ms_ref, flop);
  for (const Form& f : forms) {
    if (!picked(f)) continue;
    const float ms = time_graph(st, kLaunches, 1, [&](int) { CK(run_form<false>(f, x, w, y_own, M, N, K, sms, st)); });
    row(f.name(), ms, flop);
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
    const std::vector<uint16_t> act = download(act_ref, size_t(M) * I);
    const Form fused[] = {{2, 0, 16}, {2, 2, 16}, {1, 2, 4}, {2, 3, 16}};
    for (const Form& f : fused) {
      if (!picked(f, "+SwiGLU: ")) continue;
      CK(cudaMemset(act_own, 0xff, size_t(M) * I * 2));
      CK(run_form<true>(f, x, w, act_own, M, N, K, sms, st));
      check("SwiGLU epilogue against cuBLAS + swiglu", f, act_own, size_t(M) * I, act);
    }
    const float ms_sw = time_graph(st, kLaunches, 1, [&](int) { CK(swiglu(sp, st)); });
    std::printf("  %-44s %9.3f ms  (%.0f%% of its bytes' floor at 4.3 TB/s)\n", "swiglu kernel", ms_sw,
                100.0 * (3.0 * M * I * 2 / 4.3e12) / (ms_sw * 1e-3));
    float best = 0;
    for (const Form& f : fused) {
      if (!picked(f, "+SwiGLU: ")) continue;
      const float ms =
          time_graph(st, kLaunches, 1, [&](int) { CK(run_form<true>(f, x, w, act_own, M, N, K, sms, st)); });
      char label[96];
      std::snprintf(label, sizeof label, "+SwiGLU: %s", f.name());
      row(label, ms, flop);
      best = best == 0 || ms < best ? ms : best;
    }
    if (best > 0)
      std::printf("  cuBLAS + swiglu %.3f ms, the fastest fused form %.3f ms: %+.1f%%\n", ms_ref + ms_sw, best,
                  100.0 * (best - (ms_ref + ms_sw)) / (ms_ref + ms_sw));
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
    } else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) {
      g_only = argv[++i];
    } else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) {
      only_shape = argv[++i];
    } else if (std::atoi(argv[i]) > 0) {
      M = std::atoi(argv[i]);
    } else {
      std::fprintf(stderr, "usage: gemm_wgmma_probe [M] [--27b] [--shape gate_up|down|in_proj] [--only TEXT]\n");
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
  {  // how many pairs fit at once (the paired form's persistent grid)
    int clusters = 0;
    CK((sg::probe_gemm::max_clusters<4, false, 2, sg::probe_gemm::kEpiWide>(sms / 2 * 2, clusters)));
    std::printf("  pairs of 4-stage blocks that fit at once: %d (%d blocks)\n", clusters, 2 * clusters);
  }
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
