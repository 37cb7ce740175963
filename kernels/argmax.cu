// argmax.cu: per-row argmax with torch's NaN rule, one block per row.
#include <climits>

#include "kernels/argmax.h"
#include "kernels/device_util.cuh"

namespace sg {
namespace {

constexpr int kBlock = 1024;
constexpr int kNone = INT_MAX;  // "no candidate yet" (loses to every real element)

// True when candidate (av, ai) beats (bv, bi): NaN first, then the larger value, then the lower index.
__device__ __forceinline__ bool beats(float av, int ai, float bv, int bi) {
  const bool an = isnan(av), bn = isnan(bv);
  if (an != bn) return an;
  if (!an && av != bv) return av > bv;
  return ai < bi;
}

// Folds element i (visited in increasing index order per thread) into the thread's best.
__device__ __forceinline__ void visit(float x, int i, float& bv, int& bi) {
  if (bi == kNone) {
    bv = x;
    bi = i;
  } else if (!isnan(bv) && (isnan(x) || x > bv)) {  // strict: a tie keeps the earlier index
    bv = x;
    bi = i;
  }
}

__device__ __forceinline__ void warp_best(float& bv, int& bi) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (beats(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

__global__ void __launch_bounds__(kBlock) argmax_kernel(const ArgmaxParams p, int64_t ld, bool vec) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const int r = blockIdx.x;
  if (p.live_rows && r >= *p.live_rows) {
    if (threadIdx.x == 0) p.out[r] = 0;
    return;
  }
  const float* row = p.logits + static_cast<int64_t>(r) * ld;
  const int V = static_cast<int>(p.V);
  float bv = -INFINITY;
  int bi = kNone;
  int tail = 0;
  if (vec) {
    const int nvec = V / 4;
    const float4* row4 = reinterpret_cast<const float4*>(row);
#pragma unroll 4
    for (int j = threadIdx.x; j < nvec; j += blockDim.x) {
      const float4 q = row4[j];
      visit(q.x, 4 * j, bv, bi);
      visit(q.y, 4 * j + 1, bv, bi);
      visit(q.z, 4 * j + 2, bv, bi);
      visit(q.w, 4 * j + 3, bv, bi);
    }
    tail = nvec * 4;
  }
  for (int i = tail + threadIdx.x; i < V; i += blockDim.x) visit(row[i], i, bv, bi);
  warp_best(bv, bi);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x / 32;
    bv = lane < nw ? sv[lane] : -INFINITY;
    bi = lane < nw ? si[lane] : kNone;
    warp_best(bv, bi);
    if (lane == 0) p.out[r] = bi;
  }
}

}  // namespace

cudaError_t argmax(const ArgmaxParams& p, cudaStream_t stream) {
  if (!p.logits || !p.out || p.rows < 0 || p.V < 1 || p.V > INT_MAX) return cudaErrorInvalidValue;
  const int64_t ld = p.ld ? p.ld : p.V;
  if (ld < p.V) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  const bool vec = ld % 4 == 0 && reinterpret_cast<uintptr_t>(p.logits) % 16 == 0;
  argmax_kernel<<<static_cast<unsigned>(p.rows), kBlock, 0, stream>>>(p, ld, vec);
  return cudaGetLastError();
}

}  // namespace sg
