// probe_check.h: CK(call), the probes' check of a CUDA, cuBLAS or driver call: any non-zero status
// prints the file, line, call and status, and ends the probe with exit code 1; and upload(host
// vector), a device copy the probe keeps until it exits. For the hand-built probes of
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
#include <cuda_runtime.h>

#include <vector>

// A device copy of h (never freed: a probe's buffers live until it exits).
template <typename T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
#endif
