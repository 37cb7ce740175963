// argmax.cu: per-row argmax with torch's NaN rule: one block per row, or several blocks per row
// whose last one to finish combines their partials.
#include <climits>

#include "kernels/argmax.h"
#include "kernels/argmax_order.cuh"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

constexpr int kBlock = 1024;      // one block per row
constexpr int kSplitBlock = 256;  // a block per (row, chunk)
constexpr int kNone = INT_MAX;    // "no candidate yet" (loses to every real element)

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
    if (argmax_beats(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
}

// Best (value, index) of row[lo, hi) by this block; lo is a multiple of 4 when vec.
__device__ __forceinline__ void block_best(const float* row, int lo, int hi, bool vec, float& bv, int& bi) {
  __shared__ float sv[32];
  __shared__ int si[32];
  bv = -INFINITY;
  bi = kNone;
  int tail = lo;
  if (vec) {
    const int v0 = lo / 4, v1 = hi / 4;
    const float4* row4 = reinterpret_cast<const float4*>(row);
#pragma unroll 4
    for (int j = v0 + threadIdx.x; j < v1; j += blockDim.x) {
      const float4 q = row4[j];
      visit(q.x, 4 * j, bv, bi);
      visit(q.y, 4 * j + 1, bv, bi);
      visit(q.z, 4 * j + 2, bv, bi);
      visit(q.w, 4 * j + 3, bv, bi);
    }
    tail = v1 * 4;
  }
  for (int i = tail + threadIdx.x; i < hi; i += blockDim.x) visit(row[i], i, bv, bi);
  warp_best(bv, bi);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  const int nw = blockDim.x / 32;
  bv = lane < nw ? sv[lane] : -INFINITY;
  bi = lane < nw ? si[lane] : kNone;
  warp_best(bv, bi);  // every warp ends with the block's best
}

struct Partial {
  float v;
  int i;
};
static_assert(sizeof(Partial) == kArgmaxPartialBytes, "the workspace the model plans with (argmax_shapes.h)");

// Grid (chunks, rows). Block c of row r reduces its slice; with chunks > 1 it stores its partial,
// and the row's last block to arrive combines all of them (exact: one total order).
__global__ void __launch_bounds__(kBlock) argmax_kernel(const ArgmaxParams p, int64_t ld, bool vec, int slice) {
  pdl_start();  // kernels/launch.cuh
  const int r = blockIdx.y, c = blockIdx.x, chunks = gridDim.x;
  if (p.live_rows && r >= *p.live_rows) {
    if (c == 0 && threadIdx.x == 0) {
      p.out[r] = 0;
      if (p.pairs) p.pairs[r] = ArgmaxPair{0.f, 0};
    }
    return;
  }
  const float* row = p.logits + static_cast<int64_t>(r) * ld;
  const int V = static_cast<int>(p.V);
  const int lo = min(V, c * slice), hi = min(V, lo + slice);
  float bv;
  int bi;
  block_best(row, lo, hi, vec, bv, bi);
  if (chunks == 1) {
    if (threadIdx.x == 0) {
      p.out[r] = bi;
      if (p.pairs) p.pairs[r] = ArgmaxPair{bv, static_cast<int32_t>(bi + p.index_base)};
    }
    return;
  }
  __shared__ bool last;
  Partial* part = static_cast<Partial*>(p.workspace) + static_cast<int64_t>(r) * chunks;
  if (threadIdx.x == 0) {
    part[c] = Partial{bv, bi};
    __threadfence();  // the partial is visible before the count says so
    last = atomicAdd(&p.counters[r], 1) == chunks - 1;
  }
  __syncthreads();
  if (!last || threadIdx.x >= 32) return;
  __threadfence();
  bv = -INFINITY;
  bi = kNone;
  for (int k = threadIdx.x; k < chunks; k += 32) {
    const float v = __ldcg(&part[k].v);
    const int i = __ldcg(&part[k].i);
    if (argmax_beats(v, i, bv, bi)) bv = v, bi = i;
  }
  warp_best(bv, bi);
  if (threadIdx.x == 0) {
    p.out[r] = bi;
    if (p.pairs) p.pairs[r] = ArgmaxPair{bv, static_cast<int32_t>(bi + p.index_base)};
    p.counters[r] = 0;  // ready for the next launch
  }
}

}  // namespace

cudaError_t argmax(const ArgmaxParams& p, cudaStream_t stream) {
  const int64_t ld = p.ld ? p.ld : p.V;
  LaunchCheck c("argmax");
  c.not_null(p.logits, "logits").not_null(p.out, "out").in_range(p.rows, 0, 65535, "rows");
  c.in_range(p.V, 1, INT_MAX, "V").in_range(p.chunks, 1, kArgmaxMaxChunks, "chunks");
  c.require(p.chunks == 1 || (p.workspace && p.counters), "chunks > 1 needs workspace and counters");
  c.require(ld >= p.V, "ld must be >= V");
  c.require(p.index_base >= 0 && p.index_base + p.V <= INT_MAX, "index_base + V must fit an int32 token id");
  if (!c.ok()) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  const bool vec = ld % 4 == 0 && reinterpret_cast<uintptr_t>(p.logits) % 16 == 0;
  // Slices start at multiples of 4 (float4 loads stay aligned).
  const int64_t slice = (p.V + p.chunks - 1) / p.chunks;
  const int slice4 = static_cast<int>((slice + 3) / 4 * 4);
  const dim3 grid(static_cast<unsigned>(p.chunks), static_cast<unsigned>(p.rows));
  const int block = p.chunks > 1 ? kSplitBlock : kBlock;
  launch_kernel(argmax_kernel, grid, block, 0, stream, p, ld, vec, slice4);
  return cudaGetLastError();
}

}  // namespace sg
