// stream_kernels.cuh: the probes' stand-ins for a stream of bytes with no arithmetic: read_kernel
// (every byte read once, as a GEMM's weights) and rmw_kernel (every 16 bytes read and written back
// changed, as the delta rule's state), kThreads threads a block, kUnroll 16-byte loads in flight a
// thread, block b on [b * per, (b + 1) * per). Both let the next kernel launch at their start
// (trigger), which does nothing without the programmatic-launch attribute, and may wait for the
// kernel before after their first loads (kWait); stream_buffer, a device buffer for them; launch,
// with or without that attribute. Used by stream_floor_probe.cu, branch_overlap_probe.cu,
// writeback_probe.cu and step_floor_probe.cu; for the hand-built probes only (include
// tools/probes/probe_check.h first: CK).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace probe {

constexpr int kThreads = 256, kUnroll = 8;

// n uint4s of device memory, every byte 0x11 (the probe frees it, or keeps it until it exits).
inline uint4* stream_buffer(int64_t n) {
  uint4* p = nullptr;
  CK(cudaMalloc(&p, n * sizeof(uint4)));
  CK(cudaMemset(p, 0x11, n * sizeof(uint4)));
  return p;
}

__device__ __forceinline__ void trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// Waits for the grids this one depends on (does nothing without the PDL attribute).
__device__ __forceinline__ void dep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Block b reads uint4s [b * per, (b + 1) * per) of src, kUnroll loads a thread in flight; the sum
// goes to sink only when it equals a value it never takes, so nothing is stored but the loads stay.
// kWait: the dependency wait after the first kUnroll loads a thread (data the kernel before does
// not write, as a GEMM's weights), the rest after it; without, no wait at all.
template <bool kWait = false>
__global__ void __launch_bounds__(kThreads)
    read_kernel(const uint4* __restrict__ src, int64_t n, int64_t per, unsigned* sink) {
  trigger();  // does nothing without the PDL attribute
  const int64_t lo = blockIdx.x * per, hi = lo + per < n ? lo + per : n;
  unsigned acc = 0;
  bool waited = !kWait;
  for (int64_t i = lo + threadIdx.x; i < hi; i += int64_t{kThreads} * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + int64_t{u} * kThreads;
      v[u] = j < hi ? __ldcs(src + j) : uint4{};
    }
    if (!waited) dep_wait(), waited = true;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (!waited) dep_wait();
  if (acc == 0x9e3779b9u) *sink = acc;
}

// In place: each uint4 read and written back changed (x + 1), kUnroll a thread in flight; the
// stores streaming (st.global.cs: evict first) or, with kPlain, plain stores (as the delta rule
// decode's state stores). kWait: the dependency wait after the first kUnroll reads a thread, before
// any write.
template <bool kPlain = false, bool kWait = false>
__global__ void __launch_bounds__(kThreads) rmw_kernel(uint4* __restrict__ buf, int64_t n, int64_t per) {
  trigger();
  const int64_t lo = blockIdx.x * per, hi = lo + per < n ? lo + per : n;
  bool waited = !kWait;
  for (int64_t i = lo + threadIdx.x; i < hi; i += int64_t{kThreads} * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + int64_t{u} * kThreads;
      if (j < hi) v[u] = __ldcs(buf + j);
    }
    if (!waited) dep_wait(), waited = true;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + int64_t{u} * kThreads;
      if (j >= hi) continue;
      const uint4 w = make_uint4(v[u].x + 1, v[u].y, v[u].z, v[u].w);
      if constexpr (kPlain) {
        buf[j] = w;
      } else {
        __stcs(buf + j, w);
      }
    }
  }
  if (!waited) dep_wait();
}

// Launches kernel on grid blocks of kThreads on s, under programmatic dependent launch when pdl.
template <typename K, typename... Args>
void launch(K kernel, int grid, bool pdl, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(kThreads);
  cfg.stream = s;
  cudaLaunchAttribute attr = {};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

}  // namespace probe
