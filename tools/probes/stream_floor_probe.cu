// stream_floor_probe.cu: what a single kernel launch can move at the decode step's sizes, with no
// arithmetic at all: the floor under each op family that streams weights or state, demonstrated
// rather than computed from the 4.3 TB/s read rate. For each size (one 4B or 27B decode
// projection's weights, the LM head, one layer's delta-rule state, one attention layer's KV) it
// times three kernels:
//   read: every byte read once (16-byte loads, a sum kept so the loads stay), as a GEMM's weights;
//   rmw:  every 16 bytes read and written back in place, as the delta rule's state update;
// each in CUDA graphs of 20 launches over 8 rotating buffers (so L2 cannot serve them), once
// launched plainly (each launch ramps up and drains on its own, as a kernel after a dependency)
// and once under programmatic dependent launch with the trigger at the kernel's start (the next
// launch's blocks start as this one's retire: the asymptotic rate when nothing waits). Blocks
// take contiguous pieces (as a GEMM's row blocks do), 8 loads in flight a thread, a grid of
// `blocks_per_sm` resident blocks an SM (1, 2 and 4 tried, the best kept).
// Usage: stream_floor_probe [filter]   (the rows whose name contains filter). Build and run on the
// GPU machine (from the repository root):
//   nvcc -O3 -std=c++20 -arch=sm_90a -I. -o /tmp/stream_floor_probe tools/probes/stream_floor_probe.cu &&
//   /tmp/stream_floor_probe
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "tools/probes/probe_check.h"
#include "tools/probes/stream_kernels.cuh"

constexpr int kCopies = 8, kLaunches = 20;
using probe::kThreads;
using probe::launch;
using probe::read_kernel;
using probe::rmw_kernel;

int main(int argc, char** argv) {
  const char* filter = argc >= 2 ? argv[1] : nullptr;
  struct Size {
    const char* name;
    double mb;  // bytes / 1e6 of one launch: read (read rows) or read and written back (rmw rows)
    bool rmw;
  };
  // 4B: hidden 2560, intermediate 9216, GDN q|k|v|z|b|a 12352, attention q|gate|k|v 10240, vocab
  // 248320; 27B: hidden 5120, intermediate 17408, GDN 16480, attention 14336; decode b=32 at
  // context 1024: the delta-rule state of a layer (f32, 32 rows x Hv heads x 128 x 128) and one
  // attention layer's KV (32 rows x 1024 positions x Hkv 4 x 256 x 2 (K and V) x bf16).
  const Size sizes[] = {{"4b.out_proj/o_proj [2560,4096]", 2560.0 * 4096 * 2 / 1e6, false},
                        {"4b.down [2560,9216]", 2560.0 * 9216 * 2 / 1e6, false},
                        {"4b.qkv [10240,2560]", 10240.0 * 2560 * 2 / 1e6, false},
                        {"4b.in_proj [12352,2560]", 12352.0 * 2560 * 2 / 1e6, false},
                        {"4b.gate_up [18432,2560]", 18432.0 * 2560 * 2 / 1e6, false},
                        {"4b.lm_head [248320,2560]", 248320.0 * 2560 * 2 / 1e6, false},
                        {"4b.attention KV (b32)", 32.0 * 1024 * 4 * 256 * 2 * 2 / 1e6, false},
                        {"4b.delta state f32 (b32)", 32.0 * 32 * 128 * 128 * 4 / 1e6, true},
                        {"4b.delta state bf16 (b32)", 32.0 * 32 * 128 * 128 * 2 / 1e6, true},
                        {"27b.out_proj/o_proj [5120,6144]", 5120.0 * 6144 * 2 / 1e6, false},
                        {"27b.qkv [14336,5120]", 14336.0 * 5120 * 2 / 1e6, false},
                        {"27b.in_proj [16480,5120]", 16480.0 * 5120 * 2 / 1e6, false},
                        {"27b.down [5120,17408]", 5120.0 * 17408 * 2 / 1e6, false},
                        {"27b.gate_up [34816,5120]", 34816.0 * 5120 * 2 / 1e6, false},
                        {"27b.delta state f32 (b32)", 32.0 * 48 * 128 * 128 * 4 / 1e6, true}};
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("# %s, %d SMs, %.0f MB L2; us a launch (TB/s: bytes moved, read + written for rmw, / time)\n", prop.name,
              sms, prop.l2CacheSize / 1e6);
  std::printf("%-34s %9s | %-22s | %-22s\n", "size", "MB", "plain launches", "PDL, trigger at start");
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned* sink;
  CK(cudaMalloc(&sink, sizeof(unsigned)));
  for (const Size& z : sizes) {
    if (filter && std::string(z.name).find(filter) == std::string::npos) continue;
    const size_t bytes = static_cast<size_t>(z.mb * 1e6) / 16 * 16;  // rmw: the state, read and written
    const int64_t n = static_cast<int64_t>(bytes / 16);
    std::vector<uint4*> buf(kCopies);
    for (auto& b : buf) b = probe::stream_buffer(n);
    float best[2] = {1e30f, 1e30f};
    int best_bps[2] = {0, 0};
    for (int pdl = 0; pdl < 2; ++pdl) {
      for (int bps : {1, 2, 4}) {
        const int grid = sms * bps;
        const int64_t per = (n + grid - 1) / grid;
        const float ms = time_graph(s, kLaunches, kCopies, [&](int c) {
          if (z.rmw) {
            launch(rmw_kernel<>, grid, pdl, s, buf[c], n, per);
          } else {
            launch(read_kernel<>, grid, pdl, s, static_cast<const uint4*>(buf[c]), n, per, sink);
          }
        });
        if (ms < best[pdl]) best[pdl] = ms, best_bps[pdl] = bps;
      }
    }
    const double moved = static_cast<double>(bytes) * (z.rmw ? 2 : 1);
    std::printf("%-34s %9.1f | %8.2f us %5.2f (%d/SM) | %8.2f us %5.2f (%d/SM)\n", z.name, moved / 1e6, 1000 * best[0],
                moved / (best[0] * 1e9), best_bps[0], 1000 * best[1], moved / (best[1] * 1e9), best_bps[1]);
    for (auto& b : buf) CK(cudaFree(b));
  }
  CK(cudaGetLastError());
  return 0;
}
