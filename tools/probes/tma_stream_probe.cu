// tma_stream_probe.cu: how fast the skinny GEMM's weight stream can go with no arithmetic at all,
// and whether the weights' layout limits it. The skinny GEMM (kernels/skinny_gemm.cu) streams each
// row block's W rows through a ring of shared-memory stages with one 2-D tensor-map (TMA) copy a
// stage: a box of BN rows x 64 columns (128 bytes a row) of the row-major [N, K] matrix, so every
// copy reads BN pieces of 128 bytes that lie K * 2 bytes apart in memory. This probe runs the same
// ring (one producer lane, one consumer lane that only waits and frees each stage, S stages) over
//   rows:   the row-major [N, K] weights, as the library does;
//   packed: the same bytes laid out box by box ([N / BN][K / 64][BN][64]), so that each copy
//           reads BN * 128 contiguous bytes;
//   rows512: the row-major weights, each stage four copies of BN / 4 rows at four adjacent k
//           tiles (the same bytes a stage), so that each row's piece is 512 contiguous bytes;
// for each 4B decode projection that runs on the skinny kernel, at its block rows (grid = the row
// blocks, one wave, K whole: the library's picks at 32 rows) and at the narrower blocks that fill
// every SM; rates are of the bytes read (rows padded to whole blocks). Graphs of 20 plain
// launches over 8 rotating copies (larger than L2), as stream_floor_probe.cu times its read
// kernel; that probe's plain-launch rates are the floor to
// compare with (gate_up 4.19 TB/s, in_proj 4.01, qkv 3.85 on the H200). If `packed` streams near
// those rates where `rows` does not, the skinny kernel's gap is the layout of its weights (and
// `rows512` says whether longer pieces of each row, without repacking, get the same).
// Usage: tma_stream_probe. Build and run on a machine with an sm_90 GPU (repository root):
//   nvcc -O3 -std=c++20 -arch=sm_90a -I. -o /tmp/tma_stream_probe tools/probes/tma_stream_probe.cu \
//     kernels/launch_check.cpp kernels/launch_policy.cpp &&
//   /tmp/tma_stream_probe
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/skinny_gemm.cu"  // its tensor maps (make_map) and TMA helpers, compiled into the probe
#include "tools/probes/probe_check.h"

namespace {

constexpr int kBK = 64, kCopies = 8, kLaunches = 20;  // K a multiple of 4 * 64 (rows512)

// Block rb streams its BN rows over the whole of K: stage i holds k tile i (ring of S).
template <int BN, int S>
__global__ void __launch_bounds__(64)
    stream_kernel(const __grid_constant__ CUtensorMap map, int KT, int mode, unsigned* sink) {
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t full[S], empty[S];
  const uint32_t raw = sg::mma::smem_addr(smem_raw);
  const uint32_t ring = (raw + 1023) & ~1023u;  // 1024-aligned for the 128-byte swizzle
  constexpr uint32_t kStage = BN * kBK * 2;
  const int rb = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) {
      sg::tma::mbar_init(sg::mma::smem_addr(&full[i]), 1);
      sg::tma::mbar_init(sg::mma::smem_addr(&empty[i]), 1);
    }
    sg::tma::mbar_fence_init();
  }
  __syncthreads();
  if (warp == 0 && lane == 0) {
    for (int i = 0; i < KT; ++i) {
      const int st = i % S;
      if (i >= S) {
        sg::tma::mbar_wait(sg::mma::smem_addr(&empty[st]), ((i / S) - 1) & 1);
        sg::tma::release_reads();
      }
      const uint32_t bar = sg::mma::smem_addr(&full[st]);
      sg::tma::mbar_arrive_expect_tx(bar, kStage);
      if (mode == 1) {  // packed: box i of the row block, contiguous
        sg::tma::load_2d(ring + st * kStage, &map, 0, (rb * KT + i) * BN, bar);
      } else if (mode == 2) {  // rows512: quarter i % 4 of the rows, k tiles 4 (i / 4) .. + 3
        for (int j = 0; j < 4; ++j)
          sg::tma::load_2d(ring + st * kStage + j * (kStage / 4), &map, (4 * (i / 4) + j) * kBK,
                           rb * BN + (i % 4) * (BN / 4), bar);
      } else {
        sg::tma::load_2d(ring + st * kStage, &map, i * kBK, rb * BN, bar);
      }
    }
  } else if (warp == 1 && lane == 0) {
    unsigned acc = 0;
    for (int i = 0; i < KT; ++i) {
      const int st = i % S;
      sg::tma::mbar_wait(sg::mma::smem_addr(&full[st]), (i / S) & 1);
      unsigned v;
      asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(ring + st * kStage + 4 * (i & 31)));
      acc ^= v;
      sg::tma::mbar_arrive(sg::mma::smem_addr(&empty[st]));
    }
    if (acc == 0x9e3779b9u) *sink = acc;  // keeps the reads; never true for the probe's data
  }
}

// A bf16 [rows, cols] row-major matrix, boxes of [box_rows x 64], 128-byte swizzle: the library's
// own map (sg::make_map, kernels/skinny_gemm.cu, compiled into the probe).
CUtensorMap map_of(const void* base, int64_t rows, int64_t cols, int box_rows) {
  CUtensorMap m;
  if (!sg::make_map(&m, base, rows, cols, cols, box_rows)) {
    std::fprintf(stderr, "tensor map of %lld x %lld (box %d rows) refused\n", static_cast<long long>(rows),
                 static_cast<long long>(cols), box_rows);
    std::exit(1);
  }
  return m;
}

__global__ void fill_kernel(uint32_t* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<uint32_t>(i * 2654435761u) | 1u;
}

template <int BN, int S>
void run(const char* name, int N, int K, cudaStream_t s, unsigned* sink) {
  const int rbs = (N + BN - 1) / BN, KT = K / kBK;
  const int64_t elems = int64_t{rbs} * BN * K;  // rows padded to whole blocks (both layouts)
  const double mb = 2.0 * elems / 1e6;          // the bytes a launch reads (rows padded to whole blocks)
  constexpr size_t smem = static_cast<size_t>(S) * BN * kBK * 2 + 1024;
  CK(cudaFuncSetAttribute(stream_kernel<BN, S>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  std::vector<void*> buf(kCopies);
  std::vector<CUtensorMap> rows(kCopies), packed(kCopies), rows512(kCopies);
  for (int c = 0; c < kCopies; ++c) {
    CK(cudaMalloc(&buf[c], elems * 2));
    fill_kernel<<<1024, 256, 0, s>>>(static_cast<uint32_t*>(buf[c]), elems / 2);
    CK(cudaGetLastError());
    rows[c] = map_of(buf[c], int64_t{rbs} * BN, K, BN);  // [N padded, K]
    packed[c] = map_of(buf[c], elems / kBK, kBK, BN);    // [N / BN * K / 64 * BN, 64]
    rows512[c] = map_of(buf[c], int64_t{rbs} * BN, K, BN / 4);
  }
  CK(cudaStreamSynchronize(s));
  const char* names[3] = {"rows", "packed", "rows512"};
  for (int m = 0; m < 3; ++m) {
    const float ms = time_graph(s, kLaunches, kCopies, [&](int c) {
      stream_kernel<BN, S><<<rbs, 64, smem, s>>>(m == 0 ? rows[c] : m == 1 ? packed[c] : rows512[c], KT, m, sink);
    });
    std::printf("%-24s %6.1f MB  %-7s BN %3d  S %d  grid %4d: %7.2f us  %5.2f TB/s\n", name, mb, names[m], BN, S, rbs,
                ms * 1e3, mb / 1e6 / (ms * 1e-3));
  }
  for (void* b : buf) CK(cudaFree(b));
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  const int sms = probe_device_props(prop);
  std::printf("# %s, %d SMs; plain launches, us a launch and TB/s of the bytes read\n", prop.name, sms);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned* sink;
  CK(cudaMalloc(&sink, sizeof(unsigned)));
  // The library's picks at 32 rows (skinny_gemm_block_rows): gate_up 256 x 5, in_proj and qkv 128 x 5.
  run<256, 5>("4b.gate_up [18432,2560]", 18432, 2560, s, sink);
  run<128, 5>("4b.gate_up [18432,2560]", 18432, 2560, s, sink);
  run<64, 8>("4b.gate_up [18432,2560]", 18432, 2560, s, sink);
  run<128, 5>("4b.in_proj [12352,2560]", 12352, 2560, s, sink);
  run<64, 8>("4b.in_proj [12352,2560]", 12352, 2560, s, sink);
  run<128, 5>("4b.qkv [10240,2560]", 10240, 2560, s, sink);
  run<64, 8>("4b.qkv [10240,2560]", 10240, 2560, s, sink);
  return 0;
}
