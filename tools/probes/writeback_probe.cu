// writeback_probe.cu: does the delta rule's state write-back slow the projection after it? In the
// decode step gdn.out_proj follows the delta rule, which reads and writes back its f32 state (67 MB
// a layer at 4B b = 32, 101 MB at 27B, each way); the 27B's out_proj takes 22.6 us in the step against 18.3
// us alone (docs/BENCHMARKS.md), and one untested explanation is that the state's last stores are
// still dirty in L2 when out_proj's weight reads evict them, so its stream carries their
// write-back. This probe times graphs of stand-in layers, a state read-and-write-back stream then a
// weight read stream (stream_kernels.cuh), with the state stores plain (as the delta rule's) or
// streaming (st.global.cs, evict first), and each stream alone, so that the difference says what
// the stores' cache policy is worth:
//   rmw plain -> read   rmw cs -> read   rmw plain   rmw cs   read
// Buffers rotate over 8 copies (larger than L2). Plain launches (no programmatic edges).
// Usage: writeback_probe. Build and run on a machine with an sm_90 GPU (repository root):
//   nvcc -O3 -std=c++20 -arch=sm_90a -I. -o /tmp/writeback_probe tools/probes/writeback_probe.cu &&
//   /tmp/writeback_probe
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

struct Shape {
  const char* name;
  int64_t state, weights;  // uint4s: the state a layer (f32, read and written), out_proj's weights (bf16)
};

enum class Stores { none, plain, streaming };  // the state stream: absent, or its stores' policy

// Microseconds a layer of: the state stream, then the weight read (or not).
float time_layers(const std::vector<uint4*>& state, const std::vector<uint4*>& w, const Shape& sh, Stores rmw,
                  bool read, int sms, unsigned* sink) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int grid = 2 * sms;
  const float ms = time_graph(s, kLayers, kCopies, [&](int c) {
    const int64_t per = (sh.state + grid - 1) / grid;
    if (rmw == Stores::plain) rmw_kernel<true><<<grid, kThreads, 0, s>>>(state[c], sh.state, per);
    if (rmw == Stores::streaming) rmw_kernel<false><<<grid, kThreads, 0, s>>>(state[c], sh.state, per);
    if (read) read_kernel<><<<grid, kThreads, 0, s>>>(w[c], sh.weights, (sh.weights + grid - 1) / grid, sink);
  });
  CK(cudaStreamDestroy(s));
  return ms * 1e3f;  // time_graph gives milliseconds a launch, a launch being one stand-in layer
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  const int sms = probe_device_props(prop);
  unsigned* sink;
  CK(cudaMalloc(&sink, sizeof(unsigned)));
  // 4B: 32 rows x 32 v-heads x 128 x 128 f32 state, out_proj [2560, 4096] bf16; 27B: 32 x 48 x 128 x
  // 128 (the 27B's 48 v-heads), out_proj [5120, 6144].
  const Shape shapes[] = {{"4b", 32LL * 32 * 128 * 128 * 4 / 16, 2560LL * 4096 * 2 / 16},
                          {"27b", 32LL * 48 * 128 * 128 * 4 / 16, 5120LL * 6144 * 2 / 16}};
  std::printf("# %s, %d SMs; %d stand-in layers a graph, us a layer (median of 5 replays)\n", prop.name, sms, kLayers);
  for (const Shape& sh : shapes) {
    std::vector<uint4*> state, w;
    for (int c = 0; c < kCopies; ++c) {
      state.push_back(stream_buffer(sh.state));
      w.push_back(stream_buffer(sh.weights));
    }
    for (int round = 0; round < 2; ++round) {
      const float plain_read = time_layers(state, w, sh, Stores::plain, true, sms, sink);
      const float cs_read = time_layers(state, w, sh, Stores::streaming, true, sms, sink);
      const float plain = time_layers(state, w, sh, Stores::plain, false, sms, sink);
      const float cs = time_layers(state, w, sh, Stores::streaming, false, sms, sink);
      const float read = time_layers(state, w, sh, Stores::none, true, sms, sink);
      std::printf(
          "%s round %d: state %.1f MB, weights %.1f MB | plain -> read %.2f  cs -> read %.2f | plain %.2f  cs %.2f  "
          "read %.2f | the read after plain stores %.2f us, after streaming stores %.2f us\n",
          sh.name, round + 1, sh.state * 16 / 1e6, sh.weights * 16 / 1e6, plain_read, cs_read, plain, cs, read,
          plain_read - plain, cs_read - cs);
    }
    for (int c = 0; c < kCopies; ++c) {
      CK(cudaFree(state[c]));
      CK(cudaFree(w[c]));
    }
  }
  return 0;
}
