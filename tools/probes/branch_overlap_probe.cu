// branch_overlap_probe.cu: would a parallel branch in the decode graph hide a weight stream? A GDN
// layer's decode today is one chain: in_proj (63 MB of weights, 4B) -> conv.update -> post-conv ->
// the delta rule (134 MB of f32 state read and written at b = 32) -> the gated norm -> out_proj.
// The in_proj rows of z (21 MB) are needed only by the gated norm, so they could stream on a
// branch beside conv.update, post-conv and the delta rule. This probe builds both graphs from
// stand-in kernels with no arithmetic (stream_floor_probe.cu's read and read-and-write-back
// streams, and a small latency-bound kernel for each glue node), 24 layers a graph:
//   chain:  read 63 MB -> small -> small -> rmw 134 MB -> small -> read 21 MB
//   branch: read 42 MB -> { small -> small -> rmw 134 MB } beside { read 21 MB } -> small -> read 21 MB
// and times each (median of 5 replays, per layer). The difference bounds what splitting in_proj
// and branching its z rows could save: the 21 MB stream's own ramp and drain, and whatever of it
// overlaps the latency-bound glue rather than competing with the state stream for bandwidth.
// Buffers rotate over 8 copies (larger than L2). Plain launches (no programmatic edges).
// Usage: branch_overlap_probe. Build and run on a machine with an sm_90 GPU (repository root):
//   nvcc -O3 -std=c++20 -arch=sm_90a -I. -o /tmp/branch_overlap_probe tools/probes/branch_overlap_probe.cu &&
//   /tmp/branch_overlap_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "tools/probes/probe_check.h"

namespace {

constexpr int kThreads = 256, kUnroll = 8, kLayers = 24, kCopies = 8, kReps = 5;

// Every uint4 of src read once, kUnroll loads in flight a thread (a GEMM's weight stream).
__global__ void __launch_bounds__(kThreads) read_kernel(const uint4* __restrict__ src, int64_t n, unsigned* sink) {
  const int64_t per = (n + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per, hi = lo + per < n ? lo + per : n;
  unsigned acc = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += int64_t{kThreads} * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + int64_t{u} * kThreads;
      v[u] = j < hi ? __ldcs(src + j) : uint4{};
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x9e3779b9u) *sink = acc;
}

// Every uint4 read and written back changed (the delta rule's state update).
__global__ void __launch_bounds__(kThreads) rmw_kernel(uint4* __restrict__ buf, int64_t n) {
  const int64_t per = (n + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per, hi = lo + per < n ? lo + per : n;
  for (int64_t i = lo + threadIdx.x; i < hi; i += int64_t{kThreads} * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + int64_t{u} * kThreads;
      if (j < hi) v[u] = __ldcs(buf + j);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = i + int64_t{u} * kThreads;
      if (j < hi) __stcs(buf + j, make_uint4(v[u].x + 1, v[u].y, v[u].z, v[u].w));
    }
  }
}

// A glue node: 32 blocks, each reads and writes 4 KB (a norm or post-conv over 32 rows).
__global__ void __launch_bounds__(kThreads) small_kernel(uint4* buf) {
  uint4* row = buf + blockIdx.x * kThreads;
  const uint4 v = row[threadIdx.x];
  __syncthreads();
  row[threadIdx.x] = make_uint4(v.x + 1, v.y, v.z, v.w);
}

struct Buffers {
  std::vector<uint4*> w_main, w_z, w_out, state;
  uint4* glue = nullptr;
  int64_t n_main = 0, n_z = 0, n_out = 0, n_state = 0;
};

uint4* alloc(int64_t n) {
  uint4* p = nullptr;
  CK(cudaMalloc(&p, n * sizeof(uint4)));
  CK(cudaMemset(p, 0x11, n * sizeof(uint4)));
  return p;
}

// One layer on s (chain) or with the z stream on side (branch); `c` picks the buffer copy.
void layer(const Buffers& b, int c, bool branch, cudaStream_t s, cudaStream_t side, cudaEvent_t fork, cudaEvent_t join,
           int sms, unsigned* sink) {
  const int grid = 2 * sms;
  if (!branch) {
    read_kernel<<<grid, kThreads, 0, s>>>(b.w_main[c], b.n_main + b.n_z, sink);  // in_proj whole
  } else {
    read_kernel<<<grid, kThreads, 0, s>>>(b.w_main[c], b.n_main, sink);  // in_proj without z
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(side, fork, 0));
    read_kernel<<<grid, kThreads, 0, side>>>(b.w_z[c], b.n_z, sink);  // z rows, beside the chain
    CK(cudaEventRecord(join, side));
  }
  small_kernel<<<32, kThreads, 0, s>>>(b.glue);  // conv.update
  small_kernel<<<32, kThreads, 0, s>>>(b.glue);  // post-conv
  rmw_kernel<<<grid, kThreads, 0, s>>>(b.state[c], b.n_state);
  if (branch) CK(cudaStreamWaitEvent(s, join, 0));
  small_kernel<<<32, kThreads, 0, s>>>(b.glue);                      // gated norm (needs z)
  read_kernel<<<grid, kThreads, 0, s>>>(b.w_out[c], b.n_out, sink);  // out_proj
}

float time_layers(const Buffers& b, bool branch, int sms, unsigned* sink) {
  cudaStream_t s, side;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> ev(2 * kLayers);
  for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int l = 0; l < kLayers; ++l) layer(b, l % kCopies, branch, s, side, ev[2 * l], ev[2 * l + 1], sms, sink);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));
  cudaEvent_t a, z;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&z));
  std::vector<float> ms;
  for (int r = 0; r < kReps; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(z, s));
    CK(cudaEventSynchronize(z));
    float t;
    CK(cudaEventElapsedTime(&t, a, z));
    ms.push_back(t / kLayers);
  }
  std::sort(ms.begin(), ms.end());
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  for (auto& e : ev) CK(cudaEventDestroy(e));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(z));
  CK(cudaStreamDestroy(side));
  CK(cudaStreamDestroy(s));
  return ms[kReps / 2];
}

}  // namespace

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  // 4B: in_proj [12352, 2560] of which z [4096, 2560]; out_proj [2560, 4096]; the f32 state of 32
  // rows x 32 heads x 128 x 128.
  Buffers b;
  b.n_main = (12352LL - 4096) * 2560 * 2 / 16;
  b.n_z = 4096LL * 2560 * 2 / 16;
  b.n_out = 2560LL * 4096 * 2 / 16;
  b.n_state = 32LL * 32 * 128 * 128 * 4 / 16;
  for (int c = 0; c < kCopies; ++c) {
    b.w_main.push_back(alloc(b.n_main + b.n_z));  // the chain reads main and z as one stream
    b.w_z.push_back(b.w_main.back() + b.n_main);
    b.w_out.push_back(alloc(b.n_out));
    b.state.push_back(alloc(b.n_state));
  }
  b.glue = alloc(32 * kThreads);
  unsigned* sink;
  CK(cudaMalloc(&sink, sizeof(unsigned)));
  std::printf("# %s, %d SMs; 24 stand-in GDN decode layers a graph, us a layer (median of %d replays)\n", prop.name,
              sms, kReps);
  for (int round = 0; round < 2; ++round) {
    const float chain = time_layers(b, false, sms, sink), branch = time_layers(b, true, sms, sink);
    std::printf("round %d: chain %.2f us, branch %.2f us: the branch saves %.2f us a layer (%.1f%%)\n", round + 1,
                chain * 1e3, branch * 1e3, (chain - branch) * 1e3, 100.0 * (chain - branch) / chain);
  }
  return 0;
}
