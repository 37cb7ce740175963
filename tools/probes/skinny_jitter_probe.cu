// skinny_jitter_probe.cu: looks for races in the skinny GEMM (kernels/skinny_gemm.cu) by delaying
// its warps at random at every synchronisation point and checking that the output bytes never
// change. The kernel's arithmetic order is fixed (each warp's mma chain runs over the K tiles in
// order; the split partials are summed in split order), so every launch of one shape must give the
// same bytes whatever the timing. This file includes kernels/skinny_gemm.cu with its
// SG_SKINNY_JITTER hook defined: at each site (1: the producer between its early weight copies and
// the dependency wait; 2: the producer after a stage is freed, before its copies are requested; 3:
// a consumer warp after a stage is full, before it reads it; 4: a consumer warp between the two
// halves of its reads of a stage; 5: a consumer warp before it stores its split partial), one
// visit in 8 waits 0.25-4.4 us, chosen by a hash of the launch's seed, the block, the warp, the
// site and the tile, the same for every lane of a warp. A consumer that read a stage before its
// copy landed (delays at 1 and 2), a copy that overwrote a stage a warp was still reading (3, 4),
// or a split sum that read a partial before it was stored (5) would change bytes. What the delays
// cannot move (the order within one instruction, the hardware's own scheduling of copies) this
// probe does not test: it passed on the kernel without the cross-proxy fence before a stage's
// refill (kernels/tma_util.cuh, release_reads), whose reads a refill overtook only beside another
// kernel's shared-memory traffic, which tests_gpu "[stress]" makes.
// Per shape: one launch without delays (the reference bytes), then `launches` with delays, each
// with its own seed and y poisoned first (an output left unwritten shows), every fourth beside a
// second GEMM on another stream; then one more without delays. Prints the launches whose bytes
// differ (with the first differing element) and PASS or FAIL.
// Build: nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -I. -o /tmp/skinny_jitter \
//          tools/probes/skinny_jitter_probe.cu kernels/skinny_gemm_shapes.cpp kernels/launch_policy.cpp \
//          kernels/launch_check.cpp
// Run:   /tmp/skinny_jitter [launches a shape, default 500]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace sg_probe {
__device__ unsigned g_on = 0;    // 0: no delays
__device__ unsigned g_seed = 0;  // the launch's seed

__device__ __forceinline__ unsigned mix(unsigned h) {
  h ^= h >> 16;
  h *= 0x7feb352du;
  h ^= h >> 15;
  h *= 0x846ca68bu;
  h ^= h >> 16;
  return h;
}

// `lanes`: the lanes of the warp that reach this site together (the hash is the same for each).
__device__ __forceinline__ void jitter(int site, int index, unsigned lanes) {
  if (g_on) {
    const unsigned h =
        mix(g_seed ^ mix(blockIdx.x * 0x9e3779b9u ^
                         mix(blockIdx.y * 0x85ebca6bu ^
                             mix((threadIdx.x >> 5) * 0xc2b2ae35u ^
                                 mix(static_cast<unsigned>(site) * 977u + static_cast<unsigned>(index))))));
    if ((h & 7u) == 0) __nanosleep(256u + ((h >> 4) & 4095u));
  }
  __syncwarp(lanes);
}
}  // namespace sg_probe

#define SG_SKINNY_JITTER(site, index, lanes) ::sg_probe::jitter(site, index, lanes)
#include "kernels/skinny_gemm.cu"
#include "tools/probes/gemm_probe.h"

namespace {

// Bytes of bf16 values in [-1, 1) from a hash of (seed, i): not periodic, so a stale tile's values
// differ from the right ones.
std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  std::vector<uint16_t> h(n);
  uint64_t s = 0x9e3779b97f4a7c15ull * (seed + 1);
  for (size_t i = 0; i < n; ++i) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const float v = static_cast<float>(static_cast<int>(s >> 40) % 65536 - 32768) / 32768.0f;
    uint32_t u;
    std::memcpy(&u, &v, 4);
    h[i] = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return h;
}

struct Shape {
  const char* name;
  int M, N, K, splits, block_rows;  // splits 0 / block_rows -1: the model's pick
  bool swiglu;
  sg::DType yt;
};

struct Gemm {
  sg::SkinnyGemmParams p;
  size_t y_bytes = 0;
  cudaStream_t s = nullptr;
  Gemm(const Shape& sh, int sms, uint32_t seed) {
    const int splits = sh.splits > 0 ? sh.splits : sg::skinny_gemm_pick_splits(sh.M, sh.N, sh.K, sms);
    y_bytes = static_cast<size_t>(sh.M) * (sh.swiglu ? sh.N / 2 : sh.N) * (sh.yt == sg::DType::f32 ? 4 : 2);
    void* y = nullptr;
    CK(cudaMalloc(&y, y_bytes));
    float* workspace = nullptr;
    int32_t* counters = nullptr;
    if (const size_t ws = sg::skinny_gemm_workspace_bytes(sh.M, sh.N, splits); ws > 0) {
      CK(cudaMalloc(&workspace, ws));
      CK(cudaMalloc(&counters, static_cast<size_t>((sh.N + 63) / 64) * 4));
      CK(cudaMemset(counters, 0, static_cast<size_t>((sh.N + 63) / 64) * 4));
    }
    p = skinny_params(upload(random_bf16(static_cast<size_t>(sh.M) * sh.K, seed)),
                      upload(random_bf16(static_cast<size_t>(sh.N) * sh.K, seed + 1)), y, sh.M, sh.N, sh.K, splits,
                      workspace, counters);
    p.block_rows = sh.block_rows >= 0 ? sh.block_rows : sg::skinny_gemm_block_rows(sh.M, sh.N, sms);
    p.y_dtype = sh.yt;
    if (sh.swiglu) p.swiglu_group = 8;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  void launch() {
    CK(cudaMemsetAsync(p.y, 0xA5, y_bytes, s));
    CK(sg::skinny_gemm(p, s));
  }
  std::vector<uint8_t> bytes() {
    CK(cudaStreamSynchronize(s));
    std::vector<uint8_t> h(y_bytes);
    CK(cudaMemcpy(h.data(), p.y, y_bytes, cudaMemcpyDeviceToHost));
    return h;
  }
};

void set_jitter(unsigned on, unsigned seed) {
  CK(cudaMemcpyToSymbol(sg_probe::g_on, &on, sizeof(on)));
  CK(cudaMemcpyToSymbol(sg_probe::g_seed, &seed, sizeof(seed)));
}

}  // namespace

int main(int argc, char** argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 500;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  using sg::DType;
  const Shape shapes[] = {
      {"in_proj 7 splits, 128-row blocks", 32, 12352, 2560, 7, 128, false, DType::bf16},
      {"in_proj (model pick)", 32, 12352, 2560, 0, -1, false, DType::bf16},
      {"gate_up + SwiGLU (model pick)", 32, 18432, 2560, 0, -1, true, DType::bf16},
      {"down (model pick), f32 out", 32, 2560, 9216, 0, -1, false, DType::f32},
      {"out_proj 6 splits, 64-row blocks", 32, 2560, 4096, 6, 64, false, DType::bf16},
      {"in_proj 8 rows (model pick)", 8, 12352, 2560, 0, -1, false, DType::bf16},
      {"down 1 row, 9 splits", 1, 2560, 9216, 9, 64, false, DType::bf16},
      {"27B gate_up 32 rows (model pick)", 32, 34816, 5120, 0, -1, false, DType::bf16},
  };
  std::printf("skinny_jitter_probe: %d launches a shape with random delays at the kernel's synchronisation points\n",
              launches);
  int failed = 0;
  for (const Shape& sh : shapes) {
    Gemm g(sh, sms, 1000u + static_cast<uint32_t>(sh.N));
    Gemm other(Shape{"other", 32, 2560, 9216, 0, -1, false, DType::f32}, sms, 77u);
    set_jitter(0, 0);
    g.launch();
    const std::vector<uint8_t> want = g.bytes();
    int bad = 0;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, g.s));
    for (int r = 0; r < launches; ++r) {
      set_jitter(1, static_cast<unsigned>(r) * 2654435761u + 1u);
      g.launch();
      if (r % 4 == 3) other.launch();
      const std::vector<uint8_t> got = g.bytes();
      if (got != want) {
        size_t i = 0;
        while (got[i] == want[i]) ++i;
        if (bad < 3)
          std::printf("  %s: launch %d differs, first at byte %zu (got 0x%02x, want 0x%02x)\n", sh.name, r, i, got[i],
                      want[i]);
        ++bad;
      }
    }
    CK(cudaEventRecord(b, g.s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    set_jitter(0, 0);
    g.launch();
    const bool last_same = g.bytes() == want;
    std::printf(
        "%-36s M %2d N %5d K %5d, %d splits, %3d-row blocks: %d of %d delayed launches differ%s (%.1f us a launch "
        "with the checks)\n",
        sh.name, sh.M, sh.N, sh.K, g.p.splits, g.p.block_rows ? g.p.block_rows : 64, bad, launches,
        last_same ? "" : "; the final undelayed launch differs too", 1000.0f * ms / static_cast<float>(launches));
    failed += bad + !last_same;
  }
  std::printf("%s\n", failed == 0 ? "PASS: every launch gave the reference bytes" : "FAIL");
  return failed == 0 ? 0 : 1;
}
