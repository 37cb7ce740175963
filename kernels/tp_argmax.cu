// tp_argmax.cu: the pick over the ranks' (value, id) pairs (tp_argmax.h).
#include "kernels/argmax_order.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/tp_argmax.h"

namespace sg {
namespace {

constexpr int kBlock = 256;

__global__ void __launch_bounds__(kBlock) tp_argmax_kernel(const TpArgmaxParams p) {
  pdl_start();  // kernels/launch.cuh
  const int r = blockIdx.x * kBlock + threadIdx.x;
  if (r >= p.rows) return;
  if (p.live_rows && r >= *p.live_rows) {
    p.out[r] = 0;
    return;
  }
  ArgmaxPair best = p.pairs[r];
  for (int k = 1; k < p.ranks; ++k) {
    const ArgmaxPair c = p.pairs[k * p.rank_stride + r];
    if (argmax_beats(c.value, c.index, best.value, best.index)) best = c;
  }
  p.out[r] = best.index;
}

}  // namespace

cudaError_t tp_argmax(const TpArgmaxParams& p, cudaStream_t stream) {
  LaunchCheck c("tp_argmax");
  c.not_null(p.pairs, "pairs").not_null(p.out, "out").in_range(p.ranks, 1, 64, "ranks");
  c.in_range(p.rows, 0, 65535 * kBlock, "rows").require(p.rank_stride >= p.rows, "rank_stride must be >= rows");
  if (!c.ok()) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  launch_kernel(tp_argmax_kernel, dim3(static_cast<unsigned>((p.rows + kBlock - 1) / kBlock)), dim3(kBlock), 0, stream,
                p);
  return cudaGetLastError();
}

}  // namespace sg
