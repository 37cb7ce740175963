// delta_decode_probe.cu: delta_rule.decode alone (the recurrent step of the GDN decode, without
// conv.update and postconv), on the 4B decode-b32 shape by default (32 rows, Hk 16, Hv 32, Dk = Dv
// = 128, bf16 q, k, v): for each built split, column-block count and, with a bf16 state, column
// pairs or one column a thread group, a CUDA graph of 24 launches over 24 buffer sets (so that L2
// cannot hold the state) replayed back to back, timed with CUDA events; prints the time a launch
// (median of REPS rounds, min..max), the bytes it moves (state read and written, q, k, v, g, beta,
// out), GB/s and the fraction of the 4.3 TB/s floor, and a hash of one launch's output and state
// from the same start (variants that keep the arithmetic print the same hash). The kernel source
// is compiled into the probe from SG_PROBE_KERNEL (default kernels/delta_rule.cu), so that an edited
// copy is timed the same way; -DSG_PROBE_STAGED adds the rows of DeltaRuleDecodeParams::staged, for
// a source that has it. Usage: delta_decode_probe [f32|bf16 [ROWS [HV [REPS]]]].
// Build and run on the GPU machine (repository root; the host sources by g++, as fmt's headers
// do not compile under nvcc's host pass with C++20):
//   for f in launch_check contracts arms launch_policy; do
//     g++ -O2 -std=c++20 -I. -I/usr/local/cuda/include -c kernels/$f.cpp -o /tmp/$f.o; done &&
//   nvcc -O3 -std=c++20 -fmad=false --expt-relaxed-constexpr -gencode arch=compute_90,code=sm_90 -I. \
//     -o /tmp/delta_decode_probe tools/probes/delta_decode_probe.cu /tmp/{launch_check,contracts,arms,launch_policy}.o
//     \ -lfmt && /tmp/delta_decode_probe bf16
#ifndef SG_PROBE_KERNEL
#define SG_PROBE_KERNEL "kernels/delta_rule.cu"
#endif
#include SG_PROBE_KERNEL

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tools/probes/probe_check.h"

namespace {

constexpr int kSets = 24;  // buffer sets, as `stepgraph kernels` rotates for decode shapes

uint64_t next(uint64_t& x) {
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return x;
}
float uniform(uint64_t& x, float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(next(x) >> 40) / static_cast<float>(1 << 24);
}

// n values in [lo, hi) as bf16 bytes, or as f32 bytes rounded through bf16 (so both state dtypes
// start from the same values).
std::vector<uint8_t> random_values(size_t n, uint64_t seed, float lo, float hi, bool bf16) {
  std::vector<uint8_t> b(n * (bf16 ? 2 : 4));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    const __nv_bfloat16 h = __float2bfloat16(uniform(x, lo, hi));
    if (bf16) {
      std::memcpy(&b[2 * i], &h, 2);
    } else {
      const float f = __bfloat162float(h);
      std::memcpy(&b[4 * i], &f, 4);
    }
  }
  return b;
}

uint64_t fnv(const std::vector<uint8_t>& b, uint64_t h = 1469598103934665603ull) {
  for (uint8_t c : b) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::vector<uint8_t> download(const void* d, size_t bytes) {
  std::vector<uint8_t> h(bytes);
  CK(cudaMemcpy(h.data(), d, bytes, cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string st = argc > 1 ? argv[1] : "bf16";
  const int rows = argc > 2 ? std::atoi(argv[2]) : 32, Hv = argc > 3 ? std::atoi(argv[3]) : 32;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 7;
  if ((st != "f32" && st != "bf16") || rows < 1 || rows > 1024 || Hv < 1 || Hv % 2 != 0 || reps < 1) {
    std::fprintf(stderr, "usage: delta_decode_probe [f32|bf16 [ROWS (1..1024) [HV (even) [REPS]]]]\n");
    return 2;
  }
  const bool bf16 = st == "bf16";
  const int Hk = Hv / 2, Dk = 128, Dv = 128;
  const size_t es = bf16 ? 2 : 4, sn = size_t(rows) * Hv * Dk * Dv, qn = size_t(rows) * Hk * Dk,
               vn = size_t(rows) * Hv * Dv, gn = size_t(rows) * Hv;
  std::vector<int32_t> slots(rows);
  for (int r = 0; r < rows; ++r) slots[r] = r;
  const int32_t* dslots = upload(slots);
  const auto state0 = random_values(sn, 70, -0.1f, 0.1f, bf16);
  void* pristine = upload(state0);
  std::vector<sg::DeltaRuleDecodeParams> sets(kSets);
  for (int i = 0; i < kSets; ++i) {
    sg::DeltaRuleDecodeParams& p = sets[i];
    p.q = upload(random_values(qn, 10 + i, -0.3f, 0.3f, true));
    p.k = upload(random_values(qn, 20 + i, -0.3f, 0.3f, true));
    p.v = upload(random_values(vn, 30 + i, -1.0f, 1.0f, true));
    p.qkv_dtype = sg::DType::bf16;
    std::vector<float> g(gn), beta(gn);
    uint64_t x = 40 + i;
    for (size_t j = 0; j < gn; ++j) g[j] = uniform(x, -2.0f, 0.0f), beta[j] = uniform(x, 0.0f, 1.0f);
    p.g = upload(g);
    p.beta = upload(beta);
    p.slots = dslots;
    p.state = upload(state0);
    p.state_dtype = bf16 ? sg::DType::bf16 : sg::DType::f32;
    CK(cudaMalloc(&p.out, vn * 2));
    p.out_dtype = sg::DType::bf16;
    p.rows = rows, p.Hk = Hk, p.Hv = Hv, p.Dk = Dk, p.Dv = Dv;
  }
  // Bytes a launch moves: the state read and written, q and k, v and out, g and beta.
  const double bytes = 2.0 * sn * es + 2.0 * qn * 2 + 2.0 * vn * 2 + 2.0 * gn * 4;
  int dev = 0;
  cudaDeviceProp prop{};
  CK(cudaGetDevice(&dev));
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf(
      "device: %s (%d SMs); delta_rule.decode rows %d, Hk %d, Hv %d, Dk = Dv = 128, %s state; "
      "%d buffer sets, median of %d rounds\n",
      prop.name, prop.multiProcessorCount, rows, Hk, Hv, st.c_str(), kSets, reps);
  std::printf("%-22s %10s %22s %10s %8s %7s  %s\n", "variant", "median_us", "min..max", "bytes", "GB/s", "%floor",
              "hash (out + state of one launch)");
  cudaStream_t s = nullptr;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  // staged = 1: DeltaRuleDecodeParams::staged where the build has it (SG_PROBE_STAGED), split 1 or 2.
#ifdef SG_PROBE_STAGED
  const int max_staged = 1;
#else
  const int max_staged = 0;
#endif
  for (int staged = 0; staged <= max_staged; ++staged)
    for (int pairs = bf16 ? 1 : 0; pairs >= 0; --pairs) {
      for (int q : {1, 2, 4, 8}) {
        if (sg::delta_rule_decode_split(Dk, Dv, q) != q) continue;
        for (int cb : {1, 2, 4}) {
          if (cb > 1 && q > 2) continue;
          if (pairs == 1 && q == 1) continue;  // not paired at split 1
          if (staged == 1 && (cb > 1 || q > 2 || (bf16 && (q != 2 || pairs == 0)))) continue;
          for (auto& p : sets) p.split = q, p.col_blocks = cb, p.pair_columns = pairs == 1;
#ifdef SG_PROBE_STAGED
          for (auto& p : sets) p.staged = staged == 1;
#endif
          // One launch on set 0 from the pristine state: the hash of its output and state.
          CK(cudaMemcpyAsync(sets[0].state, pristine, sn * es, cudaMemcpyDeviceToDevice, s));
          CK(sg::delta_rule_decode(sets[0], s));
          CK(cudaStreamSynchronize(s));
          const uint64_t h = fnv(download(sets[0].state, sn * es), fnv(download(sets[0].out, vn * 2)));
          cudaGraph_t graph = nullptr;
          cudaGraphExec_t exec = nullptr;
          CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
          for (auto& p : sets) CK(sg::delta_rule_decode(p, s));
          CK(cudaStreamEndCapture(s, &graph));
          CK(cudaGraphInstantiate(&exec, graph, 0));
          const int replays = 20;
          std::vector<double> us;
          for (int r = 0; r < reps + 1; ++r) {
            CK(cudaEventRecord(e0, s));
            for (int i = 0; i < replays; ++i) CK(cudaGraphLaunch(exec, s));
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            float ms = 0.0f;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (r > 0) us.push_back(1000.0 * ms / (replays * kSets));  // round 0 warms up
          }
          std::sort(us.begin(), us.end());
          const double med = us[us.size() / 2];
          char name[64], range[64];
          std::snprintf(name, sizeof name, "q%d/c%d%s%s", q, cb, bf16 ? (pairs ? "/pairs" : "/single") : "",
                        staged ? "/staged" : "");
          std::snprintf(range, sizeof range, "%.2f..%.2f", us.front(), us.back());
          std::printf("%-22s %10.2f %22s %9.2fM %8.0f %6.1f%%  %016llx\n", name, med, range, bytes / 1e6,
                      bytes / med / 1e3, 100.0 * bytes / 4.3e12 / (med * 1e-6), static_cast<unsigned long long>(h));
          CK(cudaGraphExecDestroy(exec));
          CK(cudaGraphDestroy(graph));
        }
      }
    }
  return 0;
}
