// skinny_gemm.cu: y = x W^T for M <= 32 rows on the tensor cores (skinny_gemm.h).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/device_util.cuh"
#include "kernels/mma_util.cuh"
#include "kernels/skinny_gemm.h"

namespace sg {
namespace {

using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::ldmatrix_x4;
using mma::mma_bf16;
using mma::smem_addr;

constexpr int kThreads = 128;  // 4 warps
constexpr int kBN = 64;        // W rows per block (16 per warp)
constexpr int kBK = 64;        // K per tile: 8 chunks of 16 bytes per row
constexpr int kStages = 6;     // ring depth: 5 tiles in flight while one is computed
constexpr int kMaxM = 32;
template <int BK>
constexpr int stage_elems() { return (kBN + kMaxM) * BK; }  // bf16: W rows, then x rows
template <int BK, int S>
constexpr size_t smem_bytes() { return static_cast<size_t>(S) * stage_elems<BK>() * 2; }

// Offset (bf16 elements) of chunk c of row r in a tile of BK-wide rows (the XOR spreads the 8
// rows an ldmatrix reads over the banks).
template <int BK>
__device__ __forceinline__ int swz(int r, int c) { return r * BK + ((c ^ (r & 7)) << 3); }

template <int BK, int S, int NT, bool kF32Out, int R>
__global__ void __launch_bounds__(kThreads) skinny_gemm_kernel(const SkinnyGemmParams p, int tiles_per_split) {
  constexpr int kStageElems = (kBN + kMaxM) * BK;  // stage_elems<BK>()
  constexpr int kChunks = BK / 8;  // 16-byte chunks per row of a tile
  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* ring = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  const int rb = blockIdx.x, s = blockIdx.y, splits = gridDim.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tq = lane & 3;
  const int KT = p.K / BK;
  const int t0 = s * tiles_per_split, t1 = min(KT, t0 + tiles_per_split);
  const int nt = max(0, t1 - t0);
  const int n0 = rb * kBN;
  const auto* W = static_cast<const __nv_bfloat16*>(p.W);  // [N, K]
  const auto* x = static_cast<const __nv_bfloat16*>(p.x);  // [M, ldx]
  const int64_t ldx = p.ldx ? p.ldx : p.K;

  // Tile i of this block's K range into stage i % S; W rows past N and x rows past M are
  // zero-filled (no read).
  // R = 1: row blocks start at different tiles (spreads the x reads); R = 2 (probe only, wrong
  // results): x is never read, to price its loads.
  const int rot = R == 1 && nt > 0 ? rb % nt : 0;
  auto issue = [&](int i) {
    const int64_t k0 = static_cast<int64_t>(t0 + (i + rot) % max(nt, 1)) * BK;
    __nv_bfloat16* ws_ = ring + (i % S) * kStageElems;
    __nv_bfloat16* xs_ = ws_ + kBN * BK;
#pragma unroll
    for (int j = 0; j < kBN * kChunks / kThreads; ++j) {
      const int idx = tid + kThreads * j, r = idx / kChunks, c = idx % kChunks;
      const bool ok = n0 + r < p.N;
      cp_async16(smem_addr(ws_ + swz<BK>(r, c)), W + (ok ? (static_cast<int64_t>(n0 + r) * p.K + k0 + c * 8) : 0), ok);
    }
    for (int idx = tid; idx < 8 * NT * kChunks; idx += kThreads) {
      const int r = idx / kChunks, c = idx % kChunks;
      const bool ok = R != 2 && r < p.M;
      cp_async16(smem_addr(xs_ + swz<BK>(r, c)), x + (ok ? (r * ldx + k0 + c * 8) : 0), ok);
    }
  };
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    if (i < nt) issue(i);
    cp_async_commit();
  }

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  // ldmatrix lane roles: A (W rows of this warp): matrix q = lane / 8 holds rows (q & 1) * 8 ..
  // and the k-step's chunk (q >> 1); B (x rows): matrix q holds 8 tokens and chunk q of two k-steps.
  const int a_row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, a_chunk = lane >> 4;
  const int b_row = lane & 7, b_chunk = lane >> 3;
  for (int i = 0; i < nt; ++i) {
    if (i + S - 1 < nt) issue(i + S - 1);  // into the stage consumed at i - 1
    cp_async_commit();
    cp_async_wait<S - 1>();
    __syncthreads();  // every thread's copies of tile i landed
    const __nv_bfloat16* ws_ = ring + (i % S) * kStageElems;
    const __nv_bfloat16* xs_ = ws_ + kBN * BK;
#pragma unroll
    for (int kp = 0; kp < BK / 32; ++kp) {  // pairs of k-steps
      uint32_t a0[4], a1[4];
      ldmatrix_x4(a0, smem_addr(ws_ + swz<BK>(a_row, 4 * kp + a_chunk)));
      ldmatrix_x4(a1, smem_addr(ws_ + swz<BK>(a_row, 4 * kp + 2 + a_chunk)));
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_addr(xs_ + swz<BK>(8 * j + b_row, 4 * kp + b_chunk)));
        mma_bf16(acc[j], a0, b[0], b[1]);
        mma_bf16(acc[j], a1, b[2], b[3]);
      }
    }
    __syncthreads();  // the stage is consumed before it is refilled
  }
  cp_async_wait<0>();

  // acc[j]: c0 c1 = (W row 16 warp + g, tokens 8 j + 2 tq, + 1), c2 c3 = (row + 8, same tokens).
  const int64_t ldy = p.ldy ? p.ldy : p.N;
  auto store = [&](int token, int n, float v) {
    if constexpr (kF32Out) {
      static_cast<float*>(p.y)[token * ldy + n] = v;
    } else {
      static_cast<__nv_bfloat16*>(p.y)[token * ldy + n] = __float2bfloat16_rn(v);
    }
  };
  if (splits == 1) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int token = 8 * j + 2 * tq + (e & 1), n = n0 + warp * 16 + g + (e >> 1) * 8;
        if (token < p.M && n < p.N) store(token, n, acc[j][e]);
      }
    }
    return;
  }
  // Split K: partial [M, N] of split s; the row block's last block sums the splits in order.
  float* part = p.workspace + static_cast<int64_t>(s) * p.M * p.N;
#pragma unroll
  for (int j = 0; j < NT; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int token = 8 * j + 2 * tq + (e & 1), n = n0 + warp * 16 + g + (e >> 1) * 8;
      if (token < p.M && n < p.N) part[static_cast<int64_t>(token) * p.N + n] = acc[j][e];
    }
  }
  __shared__ bool last;
  __threadfence();  // this thread's partial is visible before the count says so
  __syncthreads();
  if (tid == 0) last = atomicAdd(&p.counters[rb], 1) == splits - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int idx = tid; idx < p.M * kBN; idx += kThreads) {
    const int token = idx / kBN, n = n0 + idx % kBN;
    if (n >= p.N) continue;
    float v = 0.0f;
    for (int k = 0; k < splits; ++k) v += __ldcg(p.workspace + (static_cast<int64_t>(k) * p.M + token) * p.N + n);
    store(token, n, v);
  }
  if (tid == 0) p.counters[rb] = 0;  // ready for the next launch
}

template <int BK, int S, int NT, int R>
cudaError_t launch_nt(const SkinnyGemmParams& p, cudaStream_t stream) {
  const int KT = p.K / BK;
  const int tps = (KT + p.splits - 1) / p.splits;
  const dim3 grid(static_cast<unsigned>((p.N + kBN - 1) / kBN), static_cast<unsigned>(p.splits));
  constexpr size_t smem = smem_bytes<BK, S>();
  if (p.y_dtype == DType::f32) {
    auto* k = skinny_gemm_kernel<BK, S, NT, true, R>;
    if (const cudaError_t e = dev::allow_dynamic_smem(k, smem); e != cudaSuccess) return e;
    k<<<grid, kThreads, smem, stream>>>(p, tps);
  } else {
    auto* k = skinny_gemm_kernel<BK, S, NT, false, R>;
    if (const cudaError_t e = dev::allow_dynamic_smem(k, smem); e != cudaSuccess) return e;
    k<<<grid, kThreads, smem, stream>>>(p, tps);
  }
  return cudaGetLastError();
}

template <int BK, int S, int R = 0>
cudaError_t launch_cfg(const SkinnyGemmParams& p, cudaStream_t stream) {
  switch ((p.M + 7) / 8) {
    case 1: return launch_nt<BK, S, 1, R>(p, stream);
    case 2: return launch_nt<BK, S, 2, R>(p, stream);
    case 3: return launch_nt<BK, S, 3, R>(p, stream);
    default: return launch_nt<BK, S, 4, R>(p, stream);
  }
}

}  // namespace

bool skinny_gemm_supports(int M, int N, int K) { return M >= 1 && M <= kMaxM && N >= 1 && K >= kBK && K % kBK == 0; }

int skinny_gemm_pick_splits(int N, int K, int num_sms) {
  if (N <= 0 || K < kBK) return 1;
  const long rb = (N + kBN - 1) / kBN, KT = K / kBK, sms = std::max(num_sms, 1);
  const int most = static_cast<int>(std::clamp<long>(KT / 4, 1, 32));
  // An SM streams its blocks' tiles at full speed from two resident blocks on (one block keeps too
  // few bytes in flight): time ~ blocks per SM x (tiles per split + 4) / min(blocks per SM, 2).
  auto cost = [&](int s) {
    const long b = (rb * s + sms - 1) / sms;
    return static_cast<double>(b) * static_cast<double>((KT + s - 1) / s + 4) / static_cast<double>(std::min<long>(b, 2));
  };
  double best = cost(1);
  for (int s = 2; s <= most; ++s) best = std::min(best, cost(s));
  for (int s = 1; s <= most; ++s) {
    if (cost(s) <= best * 1.03) return s;
  }
  return 1;
}

size_t skinny_gemm_workspace_bytes(int M, int N, int splits) {
  return splits > 1 && M > 0 && N > 0 ? static_cast<size_t>(splits) * M * N * sizeof(float) : 0;
}

cudaError_t skinny_gemm(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.M == 0) return cudaSuccess;
  if (!skinny_gemm_supports(p.M, p.N, p.K) || !p.x || !p.W || !p.y) return cudaErrorInvalidValue;
  if (p.y_dtype != DType::bf16 && p.y_dtype != DType::f32) return cudaErrorInvalidValue;
  const int64_t ldx = p.ldx ? p.ldx : p.K, ldy = p.ldy ? p.ldy : p.N;
  if (ldx < p.K || ldx % 8 != 0 || ldy < p.N || !dev::aligned16(p.x) || !dev::aligned16(p.W)) return cudaErrorInvalidValue;
  const int rbs = (p.N + kBN - 1) / kBN;
  if (p.splits < 1 || p.splits > p.K / kBK || p.splits > 65535 || rbs > 0x7fffffff) return cudaErrorInvalidValue;
  if (p.splits > 1 && (!p.workspace || !p.counters)) return cudaErrorInvalidValue;
  return launch_cfg<kBK, kStages>(p, stream);
}

}  // namespace sg
