// attn_prefill_probe.cu: the tensor-core attention prefill alone, on the 4B preset's prefill shape by default
// (32 sequences x 1024 tokens, no history, Hq 16, Hkv 4, D 256, bf16), outside any graph: times
// back-to-back launches with CUDA events and prints the time a launch, its causal TFLOP/s (4 D
// flops per (query, key) pair a head) and the fraction of the card's 790 TFLOP/s, and a checksum of
// the output (variants of the kernel that keep its arithmetic print the same one). The kernel is
// compiled into the probe from SG_PROBE_KERNEL (default: the wgmma kernel's source), so that a
// copy of that source edited for a measurement (e.g. without its K/V copies) is timed the same way;
// SG_PROBE_LAUNCH names its launcher (default sg::attention_prefill_wgmma; e.g.
// -DSG_PROBE_KERNEL='"kernels/attention_prefill_mma.cu"' -DSG_PROBE_LAUNCH=sg::attention_prefill_mma).
// Usage: attn_prefill_probe [SEQS LEN REPS [HQ HKV]] (the 27B's heads: 24 4). Build and run on the
// GPU machine (repository root):
//   nvcc -O3 -std=c++20 -fmad=false -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/attn_prefill_probe \
//     tools/probes/attn_prefill_probe.cu \
//     kernels/launch_check.cpp kernels/attention_shapes.cpp kernels/launch_policy.cpp &&
//   /tmp/attn_prefill_probe
#ifndef SG_PROBE_KERNEL
#define SG_PROBE_KERNEL "kernels/attention_prefill_wgmma.cu"
#endif
#ifndef SG_PROBE_LAUNCH
#define SG_PROBE_LAUNCH sg::attention_prefill_wgmma
#endif
#include SG_PROBE_KERNEL

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tools/probes/probe_check.h"

namespace {

std::vector<__nv_bfloat16> random_bf16(size_t n, uint64_t seed, float amp) {
  std::vector<__nv_bfloat16> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& e : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    e = __float2bfloat16(amp * (static_cast<float>(x >> 40) / static_cast<float>(1 << 24) * 2.0f - 1.0f));
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const int seqs = argc > 1 ? std::atoi(argv[1]) : 32, len = argc > 2 ? std::atoi(argv[2]) : 1024;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 20;
  const int Hq = argc > 4 ? std::atoi(argv[4]) : 16, Hkv = argc > 5 ? std::atoi(argv[5]) : 4;  // 27B: 24 4
  if (seqs < 1 || len < 1 || reps < 1 || int64_t{seqs} * len > (1 << 24) || Hkv < 1 || Hq < Hkv || Hq % Hkv != 0) {
    std::fprintf(stderr,
                 "usage: attn_prefill_probe [SEQS LEN REPS [HQ HKV]] (each >= 1, SEQS x LEN <= 2^24, HQ a multiple of "
                 "HKV; default 32 1024 20 16 4, the 4B layer; the 27B's heads are 24 4)\n");
    return 2;
  }
  const int D = 256, T = seqs * len;
  std::vector<int32_t> pos(T), tseq(T), slots(seqs);
  for (int s = 0; s < seqs; ++s) {
    slots[s] = s;
    for (int i = 0; i < len; ++i) pos[s * len + i] = i, tseq[s * len + i] = s;
  }
  const size_t qn = size_t(T) * Hq * D, cn = size_t(seqs) * len * Hkv * D;
  sg::AttentionParams p;
  p.q = upload(random_bf16(qn, 1, 1.0f));
  p.gate = upload(random_bf16(qn, 2, 1.0f));
  p.k_cache = upload(random_bf16(cn, 3, 1.0f));
  p.v_cache = upload(random_bf16(cn, 4, 1.0f));
  p.meta.positions = upload(pos);
  p.meta.token_seq = upload(tseq);
  p.meta.slots = upload(slots);
  __nv_bfloat16* out = nullptr;
  CK(cudaMalloc(&out, qn * sizeof(__nv_bfloat16)));
  p.out = out;
  p.T = T, p.Hq = Hq, p.Hkv = Hkv, p.D = D, p.max_context = len;

  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(SG_PROBE_LAUNCH(p, nullptr));  // warm-up (and the smem attribute)
  CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(a));
  for (int i = 0; i < reps; ++i) CK(SG_PROBE_LAUNCH(p, nullptr));
  CK(cudaEventRecord(b));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  ms /= static_cast<float>(reps);

  std::vector<__nv_bfloat16> h(qn);
  CK(cudaMemcpy(h.data(), out, qn * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));
  double sum = 0, asum = 0;
  for (const auto& e : h) sum += __bfloat162float(e), asum += std::fabs(__bfloat162float(e));
  uint64_t fnv = 1469598103934665603ull;  // FNV-1a of the output bytes: equal for equal bytes
  for (const unsigned char* c = reinterpret_cast<const unsigned char*>(h.data());
       c != reinterpret_cast<const unsigned char*>(h.data() + qn); ++c)
    fnv = (fnv ^ *c) * 1099511628211ull;
  const double pairs = double(seqs) * len * (len + 1) / 2.0;  // causal (query, key) pairs a head
  const double flops = 4.0 * D * Hq * pairs;
  std::printf(
      "%s: %d x %d tokens, Hq %d, Hkv %d, D %d: %.3f ms a launch, %.1f TFLOP/s (%.1f%% of 790), sum %.6e |sum| %.6e "
      "bytes %016llx\n",
      SG_PROBE_KERNEL, seqs, len, Hq, Hkv, D, ms, flops / (ms * 1e-3) / 1e12, 100.0 * flops / (ms * 1e-3) / 790e12, sum,
      asum, static_cast<unsigned long long>(fnv));
  return 0;
}
