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

#include <cstdint>
#include <cstdio>
#include <vector>

#include "tools/probes/probe_check.h"
#include "tools/probes/stream_kernels.cuh"

namespace {

using probe::kThreads;
using probe::read_kernel;
using probe::rmw_kernel;
using probe::stream_buffer;
constexpr int kLayers = 24, kCopies = 8;

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

// One layer on s (chain) or with the z stream on side (branch); `c` picks the buffer copy.
void layer(const Buffers& b, int c, bool branch, cudaStream_t s, cudaStream_t side, cudaEvent_t fork, cudaEvent_t join,
           int sms, unsigned* sink) {
  const int grid = 2 * sms;
  auto read = [&](cudaStream_t st, const uint4* src, int64_t n) {
    read_kernel<><<<grid, kThreads, 0, st>>>(src, n, (n + grid - 1) / grid, sink);
  };
  if (!branch) {
    read(s, b.w_main[c], b.n_main + b.n_z);  // in_proj whole
  } else {
    read(s, b.w_main[c], b.n_main);  // in_proj without z
    CK(cudaEventRecord(fork, s));
    CK(cudaStreamWaitEvent(side, fork, 0));
    read(side, b.w_z[c], b.n_z);  // z rows, beside the chain
    CK(cudaEventRecord(join, side));
  }
  small_kernel<<<32, kThreads, 0, s>>>(b.glue);  // conv.update
  small_kernel<<<32, kThreads, 0, s>>>(b.glue);  // post-conv
  rmw_kernel<><<<grid, kThreads, 0, s>>>(b.state[c], b.n_state, (b.n_state + grid - 1) / grid);
  if (branch) CK(cudaStreamWaitEvent(s, join, 0));
  small_kernel<<<32, kThreads, 0, s>>>(b.glue);  // gated norm (needs z)
  read(s, b.w_out[c], b.n_out);                  // out_proj
}

// Microseconds a layer: the 24 layers captured into one graph on s and timed by probe_check.h's
// time_graph; the z branch (if any) forks to `side` and joins back within each layer.
float time_layers(const Buffers& b, bool branch, int sms, unsigned* sink) {
  cudaStream_t s, side;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  const float ms = time_graph(s, kLayers, kCopies, [&](int c) { layer(b, c, branch, s, side, fork, join, sms, sink); });
  CK(cudaEventDestroy(fork));
  CK(cudaEventDestroy(join));
  CK(cudaStreamDestroy(side));
  CK(cudaStreamDestroy(s));
  return ms * 1e3f;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  const int sms = probe_device_props(prop);
  // 4B: in_proj [12352, 2560] of which z [4096, 2560]; out_proj [2560, 4096]; the f32 state of 32
  // rows x 32 heads x 128 x 128.
  Buffers b;
  b.n_main = (12352LL - 4096) * 2560 * 2 / 16;
  b.n_z = 4096LL * 2560 * 2 / 16;
  b.n_out = 2560LL * 4096 * 2 / 16;
  b.n_state = 32LL * 32 * 128 * 128 * 4 / 16;
  for (int c = 0; c < kCopies; ++c) {
    b.w_main.push_back(stream_buffer(b.n_main + b.n_z));  // the chain reads main and z as one stream
    b.w_z.push_back(b.w_main.back() + b.n_main);
    b.w_out.push_back(stream_buffer(b.n_out));
    b.state.push_back(stream_buffer(b.n_state));
  }
  b.glue = stream_buffer(32 * kThreads);
  unsigned* sink;
  CK(cudaMalloc(&sink, sizeof(unsigned)));
  std::printf("# %s, %d SMs; 24 stand-in GDN decode layers a graph, us a layer (median of 5 replays)\n", prop.name,
              sms);
  for (int round = 0; round < 2; ++round) {
    const float chain = time_layers(b, false, sms, sink), branch = time_layers(b, true, sms, sink);
    std::printf("round %d: chain %.2f us, branch %.2f us: the branch saves %.2f us a layer (%.1f%%)\n", round + 1,
                chain, branch, chain - branch, 100.0 * (chain - branch) / chain);
  }
  return 0;
}
