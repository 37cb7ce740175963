// l2_prefetch_probe.cu: what prefetching a projection's weights into L2 during the small kernel
// before it would buy. In the decode step a cuBLAS GEMM (out_proj, o_proj and down on the 4B at 32
// rows, every projection of the 27B) follows a short kernel (a norm, about 3 us) that leaves the
// DRAM idle, and it starts its weight stream only when it starts. Here each pair is a stand-in
// for that kernel (132 blocks that wait 3 us, reading nothing) followed by cublasGemmEx on one of
// 8 rotating weight copies (so L2 cannot serve them from one pair to the next), 20 pairs in a
// graph, and the stand-in either prefetches nothing or, at its start, requests part of the next
// GEMM's weights into L2 with cp.async.bulk.prefetch.L2 (a hint: the GEMM's bytes do not change):
//   none        nothing
//   whole       the whole matrix (when at most 48 MB), in 64 KB pieces over the stand-in's threads
//   rows:P      the first P bytes of every weight row (K x 2 bytes a row; P cut to 48 MB over the
//               rows): the k range every output tile of a GEMM without split-K reads first
// and, for comparison, the GEMM after the stand-in with no prefetch and no wait (the GEMM alone).
// Prints us a pair for each; a pair's time less the 3 us wait is the GEMM's share.
//   nvcc -O3 -std=c++20 -arch=sm_90a -I. -o /tmp/l2_prefetch_probe tools/probes/l2_prefetch_probe.cu -lcublas &&
//   /tmp/l2_prefetch_probe [M] [shape filter]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/probes/gemm_probe.h"
#include "tools/probes/probe_check.h"

namespace {

constexpr int kCopies = 8, kPairs = 20, kBlocks = 132, kThreads = 256;
constexpr uint64_t kWaitNs = 3000;             // the stand-in's length: a decode norm's node time
constexpr uint64_t kCap = uint64_t{48} << 20;  // at most this much is requested
constexpr uint32_t kPiece = 64 * 1024;         // bytes a prefetch instruction (whole)

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void prefetch_l2(const char* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// mode 0: nothing; 1: [0, bytes) of w in kPiece pieces; 2: the first row_bytes of each of rows
// rows, pitch bytes apart. Then every block waits until kWaitNs have passed since its start.
__global__ void standin_kernel(const char* w, uint64_t bytes, int mode, int rows, uint64_t pitch, uint32_t row_bytes) {
  const uint64_t t0 = now_ns();
  const int tid = blockIdx.x * blockDim.x + threadIdx.x, nt = gridDim.x * blockDim.x;
  if (mode == 1) {
    for (uint64_t off = uint64_t(tid) * kPiece; off < bytes; off += uint64_t(nt) * kPiece)
      prefetch_l2(w + off, static_cast<uint32_t>(bytes - off < kPiece ? bytes - off : kPiece));
  } else if (mode == 2) {
    for (int r = tid; r < rows; r += nt) prefetch_l2(w + r * pitch, row_bytes);
  }
  while (now_ns() - t0 < kWaitNs) {
  }
}

std::string fmt_us(float us) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", us);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  const int M = argc >= 2 ? std::atoi(argv[1]) : 32;
  const char* only = argc >= 3 ? argv[2] : nullptr;
  struct Shape {
    const char* name;
    int N, K;
  };
  const Shape shapes[] = {
      {"gdn.out_proj", 2560, 4096},     {"mlp.down", 2560, 9216},         {"gdn.in_proj", 12352, 2560},
      {"mlp.gate_up", 18432, 2560},     {"27b.gdn.out_proj", 5120, 6144}, {"27b.attn.qkv", 14336, 5120},
      {"27b.gdn.in_proj", 16480, 5120}, {"27b.mlp.down", 5120, 17408},    {"27b.mlp.gate_up", 34816, 5120}};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const cublasHandle_t h = probe_cublas(s);
  std::printf("M = %d; us a pair (3 us stand-in + cublasGemmEx), 20 pairs over 8 weight copies\n", M);
  std::printf("%-17s %8s | %8s %8s %14s %14s %14s | %s\n", "op", "MB", "none", "whole", "rows:256B", "rows:1KB",
              "rows:4KB", "GEMM alone");
  for (const Shape& sh : shapes) {
    if (only && std::string(sh.name).find(only) == std::string::npos) continue;
    const size_t wb = size_t(sh.N) * sh.K * 2;
    const std::vector<void*> W = probe_weight_copies(sh.N, sh.K, kCopies, true);
    void* x = probe_x(M, sh.K);
    void* y;
    CK(cudaMalloc(&y, size_t(M) * sh.N * 2));
    auto gemm = [&](int c) { gemm_ex(h, W[c], x, y, M, sh.N, sh.K); };
    const uint64_t pitch = uint64_t(sh.K) * 2;
    auto pair = [&](int mode, uint32_t row_bytes) {
      return 1000 * time_graph(s, kPairs, kCopies, [&](int c) {
               const uint64_t bytes = mode == 1 ? std::min<uint64_t>(wb, kCap) : 0;
               standin_kernel<<<kBlocks, kThreads, 0, s>>>(static_cast<const char*>(W[c]), bytes, mode, sh.N, pitch,
                                                           row_bytes);
               CK(cudaGetLastError());
               gemm(c);
             });
    };
    const float none = pair(0, 0);
    const std::string whole = wb <= kCap ? fmt_us(pair(1, 0)) : "-";
    std::string rows_t[3];
    const uint32_t wanted[3] = {256, 1024, 4096};
    for (int i = 0; i < 3; ++i) {
      // P, cut to the cap over the rows and to the row, in 16-byte units
      const uint64_t p = std::min<uint64_t>({wanted[i], kCap / sh.N / 16 * 16, pitch});
      rows_t[i] = fmt_us(pair(2, static_cast<uint32_t>(p))) + (p < wanted[i] ? " (" + std::to_string(p) + " B)" : "");
    }
    const float alone = 1000 * time_graph(s, kPairs, kCopies, gemm);
    std::printf("%-17s %8.1f | %8.2f %8s %14s %14s %14s | %.2f\n", sh.name, wb / 1e6, none, whole.c_str(),
                rows_t[0].c_str(), rows_t[1].c_str(), rows_t[2].c_str(), alone);
    CK(cudaFree(x));
    CK(cudaFree(y));
    for (auto& w : W) CK(cudaFree(w));
  }
  return 0;
}
