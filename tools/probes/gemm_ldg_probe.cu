// gemm_ldg_probe.cu: a skinny GEMM that streams W like a plain read kernel. y[M, N] = x[M, K]
// W[N, K]^T, bf16 in, f32 accumulate, bf16 out, M <= 32, as kernels/skinny_gemm.h, but with no
// shared-memory ring for W: every thread loads 16 bytes of a W row (8 consecutive k) straight into
// registers, U 32-wide k chunks ahead (the plain read kernel of stream_floor_probe.cu reaches
// 4.0-4.2 TB/s on these sizes that way, where the TMA ring kernel stops at 3.2-3.6), and feeds them
// to mma.sync m16n8k16 as A fragments under a permutation of k: in a 32-wide chunk, lane
// (g = lane / 4, c = lane % 4) holds k 8c .. 8c + 7 of rows g and g + 8, which serve as the
// fragment's k (2c, 2c + 1, 2c + 8, 2c + 9) of two k16 steps (8c .. 8c + 3, then 8c + 4 .. 8c + 7).
// x is read with the same permutation (one 16-byte shared load a lane an n8 tile covers both
// steps) from a shared copy of the block's K range, loaded once. A sum over k does not care about
// its order, so the products are the GEMM's; the f32 rounding order differs from the ring kernel's.
// Block: W warps x RT row tiles of 16 rows; grid (ceil(N / rows), splits), the splits summed as the
// library kernel does (workspace, per-row-block counter, last block sums in split order). The
// `P-` variants read W from a packed copy (pack_kernel: each 16-row tile's 32-wide chunks as 1 KB
// blocks in the order the lanes read them), so that a warp's loads cover 512 contiguous bytes.
// Result on the H200 (docs/BENCHMARKS.md): at 32 rows 1.3-2.0 TB/s row-major and 1.4-2.7 packed,
// against 1.7-3.9 for the library kernel: not kept.
// It times, per 4B / 27B decode shape at M rows, the library's kernel at its pick, then each variant
// at its best split count, plain launches and under PDL (both prefetch W before the dependency wait),
// and checks each against cublasGemmEx.
//   nvcc -O3 -std=c++20 -arch=sm_90a -I. -o /tmp/gemm_ldg_probe tools/probes/gemm_ldg_probe.cu \
//     kernels/skinny_gemm_shapes.cpp kernels/launch_policy.cpp kernels/launch_check.cpp -lcublas && /tmp/gemm_ldg_probe
//     [M] [shape filter|all] [variant filter]
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/skinny_gemm.cu"  // the library kernel, its split sum and stores
#include "tools/probes/gemm_probe.h"
#include "tools/probes/probe_check.h"

namespace {

constexpr int kCopies = 8, kLaunches = 20;
constexpr int kXPad = 32;  // bf16 elements of padding a shared x row (64 bytes: 8 lanes of a phase hit distinct banks)

// One chunk (32 k) of the block's x copy: lane (g, c) reads x[8 j + g][32 q + 8 c .. + 8].
template <int WARPS, int RT, int U, int NT, bool PACKED>
__global__ void __launch_bounds__(WARPS * 32) ldg_gemm_kernel(const sg::SkinnyGemmParams p, int chunks_per_split) {
  extern __shared__ __align__(16) __nv_bfloat16 xs[];  // [8 NT][klen + kXPad]
  constexpr int BN = WARPS * 16 * RT;
  const int rb = blockIdx.x, s = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, c = lane & 3;
  const int KC = p.K / 32;
  const int q0 = s * chunks_per_split, nq = max(0, min(KC, q0 + chunks_per_split) - q0);
  const int klen = nq * 32, ldxs = klen + kXPad;
  const int n0 = rb * BN;
  // W rows of this lane: tile r, half h: n0 + 16 (RT warp + r) + g + 8 h (clamped: rows past N
  // load row N - 1 and are never stored).
  const uint4* wrow[RT][2];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = min(p.N - 1, n0 + 16 * (RT * warp + r) + g + 8 * h);
      const auto* w = static_cast<const __nv_bfloat16*>(p.W);
      wrow[r][h] = reinterpret_cast<const uint4*>(
          PACKED ? w + ((static_cast<int64_t>(n / 16) * KC + q0) * 2 + h) * 256 + lane * 8
                 : w + static_cast<int64_t>(n) * p.K + static_cast<int64_t>(q0) * 32 + 8 * c);
    }
  constexpr int kStep = PACKED ? 64 : 4;  // uint4s from one chunk of a row (tile) to the next
  uint4 wr[U][RT][2];
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) wr[u][r][h] = u < nq ? __ldcs(wrow[r][h] + kStep * u) : uint4{};
  sg::pdl_start();
  {  // x rows 0 .. 8 NT - 1 of the K range (zeros past M), 16 bytes a thread at a time
    const int64_t ldx = p.ldx ? p.ldx : p.K;
    const int per_row = klen / 8;
    for (int i = threadIdx.x; i < 8 * NT * per_row; i += WARPS * 32) {
      const int t = i / per_row, e = (i % per_row) * 8;
      // cp.async: every copy in flight at once (a load then a shared store a step was a chain of
      // L2 round trips, ~10 us at 16 copies a thread)
      const uint32_t dst = sg::mma::smem_addr(xs + t * ldxs + e);
      const __nv_bfloat16* src = static_cast<const __nv_bfloat16*>(p.x) + min(t, p.M - 1) * ldx + q0 * 32 + e;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(t < p.M ? 16 : 0));
    }
    asm volatile("cp.async.wait_all;\n" ::: "memory");
  }
  __syncthreads();
  float acc[RT][NT][4];
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j) acc[r][j][0] = acc[r][j][1] = acc[r][j][2] = acc[r][j][3] = 0.0f;
  for (int i0 = 0; i0 < nq; i0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = i0 + u;
      if (i < nq) {
        uint4 xv[NT];
#pragma unroll
        for (int j = 0; j < NT; ++j) xv[j] = *reinterpret_cast<const uint4*>(xs + (8 * j + g) * ldxs + 32 * i + 8 * c);
#pragma unroll
        for (int r = 0; r < RT; ++r) {
          const uint32_t a0[4] = {wr[u][r][0].x, wr[u][r][1].x, wr[u][r][0].y, wr[u][r][1].y};
          const uint32_t a1[4] = {wr[u][r][0].z, wr[u][r][1].z, wr[u][r][0].w, wr[u][r][1].w};
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            sg::mma::mma_bf16(acc[r][j], a0, xv[j].x, xv[j].y);
            sg::mma::mma_bf16(acc[r][j], a1, xv[j].z, xv[j].w);
          }
        }
        const int nx = i + U;  // refill this slot
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            if (nx < nq) wr[u][r][h] = __ldcs(wrow[r][h] + kStep * nx);
      }
    }
  }
  // acc[r][j]: c0 c1 = (row n0 + 16 (RT warp + r) + g, tokens 8 j + 2 c, + 1), c2 c3 = (row + 8, same).
  const int splits = gridDim.y;
  float* part = splits > 1 ? p.workspace + static_cast<int64_t>(s) * p.M * p.N : nullptr;
#pragma unroll
  for (int r = 0; r < RT; ++r)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int token = 8 * j + 2 * c + (e & 1), n = n0 + 16 * (RT * warp + r) + g + (e >> 1) * 8;
        if (token >= p.M || n >= p.N) continue;
        if (part) {
          part[static_cast<int64_t>(token) * p.N + n] = acc[r][j][e];
        } else {
          sg::store_y<false>(p, token, n, acc[r][j][e]);
        }
      }
  if (!part) return;
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&p.counters[rb], 1) == splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  sg::sum_splits<BN, false>(p, n0, splits, threadIdx.x, blockDim.x, p.M);
  if (threadIdx.x == 0) p.counters[rb] = 0;
}

template <int WARPS, int RT, int U, bool PACKED = false>
cudaError_t launch_ldg(const sg::SkinnyGemmParams& p, cudaStream_t stream) {
  constexpr int BN = WARPS * 16 * RT;
  const int KC = p.K / 32, cps = (KC + p.splits - 1) / p.splits;
  const size_t smem = static_cast<size_t>(8 * 4) * (cps * 32 + kXPad) * 2;
  if (smem > 200 * 1024) return cudaErrorInvalidValue;
  auto* k = ldg_gemm_kernel<WARPS, RT, U, 4, PACKED>;
  if (const cudaError_t e = sg::dev::allow_dynamic_smem(k, smem); e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((p.N + BN - 1) / BN), static_cast<unsigned>(p.splits));
  sg::launch_kernel(k, grid, WARPS * 32, smem, stream, p, cps);
  return cudaGetLastError();
}

// W [N, K] (N % 16 == 0) into the packed layout the PACKED kernel reads: row tile T = n / 16,
// chunk q = k / 32: 1 KB [half h = (n % 16) / 8][g = n % 8][c = (k % 32) / 8][8 k], tiles of a
// row tile's chunks one after another, so a warp's 16-byte loads cover 512 contiguous bytes.
__global__ void pack_kernel(const __nv_bfloat16* w, __nv_bfloat16* out, int N, int K) {
  const int64_t total = static_cast<int64_t>(N) * K, KC = K / 32;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / K, k = i % K;
    const int64_t T = n / 16, h = (n % 16) / 8, g = n % 8, q = k / 32, c = (k % 32) / 8, e = k % 8;
    out[((T * KC + q) * 2 + h) * 256 + (g * 4 + c) * 8 + e] = w[i];
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int M = argc >= 2 ? std::atoi(argv[1]) : 32;
  const char* only = argc >= 3 && std::string(argv[2]) != "all" ? argv[2] : nullptr;
  const char* vfilter = argc >= 4 ? argv[3] : nullptr;  // variants whose name holds it
  struct Shape {
    const char* name;
    int N, K;
  };
  const Shape shapes[] = {{"gdn.in_proj", 12352, 2560},     {"gdn.out_proj", 2560, 4096},
                          {"mlp.gate_up", 18432, 2560},     {"mlp.down", 2560, 9216},
                          {"attn.qkv", 10240, 2560},        {"27b.gdn.in_proj", 16480, 5120},
                          {"27b.gdn.out_proj", 5120, 6144}, {"27b.mlp.gate_up", 34816, 5120},
                          {"27b.mlp.down", 5120, 17408},    {"27b.attn.qkv", 14336, 5120}};
  struct Variant {
    const char* name;
    cudaError_t (*fn)(const sg::SkinnyGemmParams&, cudaStream_t);
  };
  const Variant variants[] = {{"w4r2u4", launch_ldg<4, 2, 4>},         {"w4r1u8", launch_ldg<4, 1, 8>},
                              {"w8r2u4", launch_ldg<8, 2, 4>},         {"w8r1u8", launch_ldg<8, 1, 8>},
                              {"w4r2u6", launch_ldg<4, 2, 6>},         {"w4r1u4", launch_ldg<4, 1, 4>},
                              {"P-w4r1u8", launch_ldg<4, 1, 8, true>}, {"P-w8r1u8", launch_ldg<8, 1, 8, true>},
                              {"P-w4r2u4", launch_ldg<4, 2, 4, true>}, {"P-w4r1u4", launch_ldg<4, 1, 4, true>}};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const cublasHandle_t h = probe_cublas(s);
  float* ws;
  int32_t* cnt;
  CK(cudaMalloc(&ws, size_t(16) * 32 * 40000 * 4));
  CK(cudaMalloc(&cnt, 8192 * 4));
  CK(cudaMemset(cnt, 0, 8192 * 4));
  std::printf("M = %d; us a launch (TB/s of W), plain / PDL; variant/splits\n", M);
  for (const Shape& sh : shapes) {
    if (only && std::string(sh.name).find(only) == std::string::npos) continue;
    const size_t wb = size_t(sh.N) * sh.K * 2;
    const std::vector<void*> W = probe_weight_copies(sh.N, sh.K, kCopies, false);  // copy 0: the check's
    std::vector<void*> Wp(kCopies);                                                // the packed layout of each copy
    for (int cc = 0; cc < kCopies; ++cc) {
      CK(cudaMalloc(&Wp[cc], wb));
      pack_kernel<<<1024, 256>>>(static_cast<const __nv_bfloat16*>(W[cc]), static_cast<__nv_bfloat16*>(Wp[cc]), sh.N,
                                 sh.K);
      CK(cudaGetLastError());
    }
    CK(cudaDeviceSynchronize());
    void* x = probe_x(M, sh.K);
    void* y;
    CK(cudaMalloc(&y, size_t(M) * sh.N * 2));
    auto params = [&](void* w, int splits) { return skinny_params(x, w, y, M, sh.N, sh.K, splits, ws, cnt); };
    std::vector<uint16_t> want(size_t(M) * sh.N), got(want.size());
    gemm_ex(h, W[0], x, y, M, sh.N, sh.K);
    CK(cudaStreamSynchronize(s));
    CK(cudaMemcpy(want.data(), y, want.size() * 2, cudaMemcpyDeviceToHost));
    auto check = [&](auto fn, int splits, bool packed) {  // largest |difference| over largest |y|
      CK(cudaMemset(y, 0, got.size() * 2));
      CK(cudaDeviceSynchronize());
      CK(fn(params(packed ? Wp[0] : W[0], splits), s));
      CK(cudaStreamSynchronize(s));
      CK(cudaMemcpy(got.data(), y, got.size() * 2, cudaMemcpyDeviceToHost));
      return max_rel_diff_bf16(got, want);
    };
    std::printf("%-17s N %6d K %6d %6.1f MB |", sh.name, sh.N, sh.K, wb / 1e6);
    for (int pdl = 0; pdl < 2; ++pdl) {
      sg::PdlScope scope(pdl == 1);
      sg::SkinnyGemmParams lib = params(W[0], sg::skinny_gemm_pick_splits(M, sh.N, sh.K, 132));
      lib.block_rows = sg::skinny_gemm_block_rows(M, sh.N, 132);
      const float tl = time_graph(s, kLaunches, kCopies, [&](int cc) {
        sg::SkinnyGemmParams q = lib;
        q.W = W[cc];
        CK(sg::skinny_gemm(q, s));
      });
      std::printf(" %s lib %d/%d: %.2f (%.2f)", pdl ? "PDL" : "plain", lib.block_rows, lib.splits, 1000 * tl,
                  wb / (tl * 1e9));
      for (const Variant& v : variants) {
        if (vfilter && !std::strstr(v.name, vfilter)) continue;
        const bool packed = v.name[0] == 'P';
        const std::vector<void*>& WW = packed ? Wp : W;
        float best = 1e30f;
        int bs = 0;
        for (int sp : {1, 2, 3, 4, 5, 6, 8, 12}) {
          if (sp > sh.K / 128) continue;
          if (v.fn(params(WW[0], sp), s) != cudaSuccess) {  // shared x copy too large at this split
            (void)cudaGetLastError();
            continue;
          }
          CK(cudaStreamSynchronize(s));
          const float t = time_graph(s, kLaunches, kCopies, [&](int cc) { CK(v.fn(params(WW[cc], sp), s)); });
          if (t < best) best = t, bs = sp;
        }
        const double err = bs ? check(v.fn, bs, packed) : 1.0;
        std::printf(" %s/%d: %.2f (%.2f)%s", v.name, bs, 1000 * best, wb / (best * 1e9), err < 1e-2 ? "" : " BAD");
      }
      std::printf(pdl ? "\n" : " |");
    }
    CK(cudaFree(x));
    CK(cudaFree(y));
    for (auto& w : W) CK(cudaFree(w));
    for (auto& w : Wp) CK(cudaFree(w));
  }
  return 0;
}
