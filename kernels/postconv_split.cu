// postconv_split.cu: the post-conv `split` arm: grid (T, Hk + Hv), 128 threads, one block per
// (token, head), the blocks of one token started together (launch order lin = x + y * T does
// token lin / (Hk+Hv), head lin % (Hk+Hv)). Blocks y < Hk normalise q head y (warp 0) and k head y (warp 1) with the
// one-warp tree of postconv_common.cuh; block Hk + hv copies v head hv (16-byte vectors when aligned) and computes the
// gates of hv. Byte-identical to megablock (same additions, same operands).
#include "kernels/launch.cuh"
#include "kernels/postconv_common.cuh"

namespace sg::postconv_detail {
namespace {

__global__ void __launch_bounds__(128) postconv_split_kernel(const PostconvParams p) {
  pdl_start();  // kernels/launch.cuh
  const int nh = p.Hk + p.Hv;
  const int lin = blockIdx.x + blockIdx.y * gridDim.x;  // launch order, token-major (see token_tile)
  const int t = lin / nh, y = lin % nh;
  if (t >= p.T) return;
  const int tid = threadIdx.x;
  if (y < p.Hk) {
    qk_head_two_warps(p, t, y, tid >> 5, tid & 31);
    return;
  }
  const int hv = y - p.Hk;
  // The gate is computed by the last warp, which has no v to copy when Dv <= 96 * (16 / es).
  const bool gate_thread = tid == static_cast<int>(blockDim.x) - 1;
  GateIn gi{};
  if (gate_thread) gi = gate_load(p, t, hv);
  copy_row(p.conv, p.conv_dtype, static_cast<int64_t>(t) * p.conv_stride + 2 * p.Hk * p.Dk + hv * p.Dv, p.v,
           p.qkv_dtype, (static_cast<int64_t>(t) * p.Hv + hv) * p.Dv, p.Dv, tid, blockDim.x);
  if (gate_thread) gate_finish(p, t, hv, gi);
}

}  // namespace

cudaError_t launch_split(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream) {
  launch_kernel(postconv_split_kernel, dim3(c.grid.x, c.grid.y, c.grid.z), dim3(c.block.x, c.block.y, c.block.z),
                c.smem_bytes, stream, p);
  return cudaGetLastError();
}

}  // namespace sg::postconv_detail
