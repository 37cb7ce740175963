// probe_check.h: CK(call), the probes' check of a CUDA, cuBLAS or driver call: any non-zero status
// prints the file, line, call and status, and ends the probe with exit code 1; upload(host
// vector), a device copy the probe keeps until it exits; time_graph, the probes' timing of a
// graph of launches; the GEMM probes' inputs and their check. For the hand-built probes of
// tools/probes/ only.
#pragma once
#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                           \
  do {                                                                                  \
    auto e_ = (x);                                                                      \
    if (static_cast<int>(e_) != 0) {                                                    \
      std::fprintf(stderr, "%s:%d: %s failed (%d)\n", __FILE__, __LINE__, #x, (int)e_); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// The current device's properties and SM count (a probe's first lines print them).
inline int probe_device_props(cudaDeviceProp& prop) {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  CK(cudaGetDeviceProperties(&prop, dev));
  return sms;
}

// A device copy of h (never freed: a probe's buffers live until it exits).
template <typename T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Milliseconds a launch: body(i % copies) for i < launches captured into one graph, replayed once
// to warm up, then the median of 5 timed replays over the launches (with copies rotating buffers
// larger than L2, nothing is served from it across launches).
template <typename F>
float time_graph(cudaStream_t s, int launches, int copies, F body) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) body(i % copies);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float t;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / static_cast<float>(launches));
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

// Pseudo-random values in [-1, 1) from the state s (a 64-bit LCG, advanced), and n bf16 values of
// them scaled by `scale`, from seed: the same values on every run and machine.
inline float probe_rnd(uint64_t& s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>(static_cast<int32_t>(s >> 32)) / 2147483648.0f;
}
inline std::vector<__nv_bfloat16> probe_random_bf16(size_t n, float scale, uint64_t seed) {
  std::vector<__nv_bfloat16> v(n);
  for (auto& e : v) e = __float2bfloat16(scale * probe_rnd(seed));
  return v;
}

// The GEMM probes' inputs: W [N, K] varying by row and column, x [M, K], small exact bf16 values.
inline std::vector<__nv_bfloat16> probe_weights(int N, int K) {
  std::vector<__nv_bfloat16> h(static_cast<size_t>(N) * K);
  for (size_t i = 0; i < h.size(); ++i) h[i] = __float2bfloat16(float(int((i / K) * 5 + i % K) % 13 - 6) / 16);
  return h;
}
inline std::vector<__nv_bfloat16> probe_activations(int M, int K) {
  std::vector<__nv_bfloat16> h(static_cast<size_t>(M) * K);
  for (size_t i = 0; i < h.size(); ++i) h[i] = __float2bfloat16(float(int((i / K) * 7 + 3 * (i % K)) % 17 - 8) / 8);
  return h;
}

// The largest |got - want| over the largest |want|, both bf16 bit patterns.
inline double max_rel_diff_bf16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  auto f32 = [](uint16_t b) {
    const uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  double worst = 0, scale = 1e-30;
  for (size_t e = 0; e < got.size() && e < want.size(); ++e) {
    worst = std::max(worst, double(std::fabs(f32(got[e]) - f32(want[e]))));
    scale = std::max(scale, double(std::fabs(f32(want[e]))));
  }
  return worst / scale;
}
#endif
