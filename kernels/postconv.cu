// postconv.cu: the post-conv launcher (a closed switch over the four arms) and the seed's two
// one-token-per-block arms, megablock (the byte reference) and fast. split and token_tile live in
// postconv_split.cu and postconv_token_tile.cu; the shared helpers in postconv_common.cuh.
//
// megablock computes the sum of squares as a shared-memory tree over P = the next power of two
// >= Dk (zeros beyond Dk): s[i] += s[i + h] for h = P/2 .. 1. For Dk = 128 that is the contract's
// "i + 64, then 32, 16, 8, 4, 2, 1"; every other arm performs the same additions on the same
// operands (see postconv_common.cuh and postconv_token_tile.cu for the proofs).
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/postconv_common.cuh"

namespace sg {
namespace {

using namespace postconv_detail;

// Normalises one head of `Dk` features read at conv[t, col0 ..] into out[t, h, :], using `lanes`
// threads starting at `lane` and the shared array s[P]. All threads of the block must call it
// (it synchronises).
__device__ void l2norm_head(const PostconvParams& p, int t, int col0, void* out, int h, float* s, int lane, int lanes) {
  const int P = next_pow2(p.Dk);
  const int64_t in0 = static_cast<int64_t>(t) * p.conv_stride + col0;
  for (int i = lane; i < P; i += lanes) {
    float x = i < p.Dk ? dev::load(p.conv, p.conv_dtype, in0 + i) : 0.0f;
    s[i] = x * x;
  }
  __syncthreads();
  for (int h2 = P / 2; h2 >= 1; h2 /= 2) {
    for (int i = lane; i < h2; i += lanes) s[i] = s[i] + s[i + h2];
    __syncthreads();
  }
  const float inv = 1.0f / sqrtf(s[0] + 1e-6f);
  const int64_t o0 = (static_cast<int64_t>(t) * p.Hk + h) * p.Dk;
  for (int i = lane; i < p.Dk; i += lanes)
    dev::store(out, p.qkv_dtype, o0 + i, dev::load(p.conv, p.conv_dtype, in0 + i) * inv);
}

// Reference arm: grid (T, Hk + 1), 256 threads. Blocks h < Hk: threads 0..127 normalise q head h,
// 128..255 k head h, each half with its own tree. Block Hk copies all of v and computes all gates.
__global__ void postconv_megablock_kernel(const PostconvParams p) {
  pdl_start();  // kernels/launch.cuh
  __shared__ float s[2][kMaxD];
  const int t = blockIdx.x, h = blockIdx.y;
  if (t >= p.T) return;  // whole block: before any barrier
  const int half = threadIdx.x / 128, lane = threadIdx.x % 128;
  if (h < p.Hk) {
    const int col0 = half == 0 ? h * p.Dk : p.Hk * p.Dk + h * p.Dk;
    l2norm_head(p, t, col0, half == 0 ? p.q : p.k, h, s[half], lane, 128);
    return;
  }
  const int v0 = 2 * p.Hk * p.Dk, nv = p.Hv * p.Dv;
  for (int i = threadIdx.x; i < nv; i += blockDim.x) {
    dev::copy(p.v, p.qkv_dtype, static_cast<int64_t>(t) * nv + i, p.conv, p.conv_dtype,
              static_cast<int64_t>(t) * p.conv_stride + v0 + i);
  }
  for (int hv = threadIdx.x; hv < p.Hv; hv += blockDim.x) gates_one(p, t, hv);
}

// Fast arm: same grid, 128 threads; the blocks of one token start together (block (x, y), launch
// order lin = x + y * gridDim.x, does token lin / (Hk+1), head lin % (Hk+1)). Heads h < Hk: warp 0
// normalises q head h, warp 1 k head h, each with the one-warp tree (registers and shuffles, no
// barrier). Head Hk: the gate inputs of the first 128 v-heads are loaded first, then v is copied
// with 16-byte vectors (four in flight per thread) when aligned, then the gates are finished.
__global__ void __launch_bounds__(128) postconv_fast_kernel(const PostconvParams p) {
  pdl_start();  // kernels/launch.cuh
  const int nh = p.Hk + 1;
  const int lin = blockIdx.x + blockIdx.y * gridDim.x;  // launch order, token-major (see token_tile)
  const int t = lin / nh, h = lin % nh;
  if (t >= p.T) return;
  const int tid = threadIdx.x;
  if (h < p.Hk) {
    qk_head_two_warps(p, t, h, tid >> 5, tid & 31);
    return;
  }
  const bool has_gate = tid < p.Hv;
  GateIn gi{};
  if (has_gate) gi = gate_load(p, t, tid);
  const int nv = p.Hv * p.Dv;
  copy_row(p.conv, p.conv_dtype, static_cast<int64_t>(t) * p.conv_stride + 2 * p.Hk * p.Dk, p.v, p.qkv_dtype,
           static_cast<int64_t>(t) * nv, nv, tid, blockDim.x);
  if (has_gate) gate_finish(p, t, tid, gi);
  for (int hv = tid + blockDim.x; hv < p.Hv; hv += blockDim.x) gates_one(p, t, hv);
}

dim3 to_dim3(const Dim3& d) { return dim3(d.x, d.y, d.z); }

bool float_type(DType t) { return t == DType::f32 || t == DType::bf16; }

}  // namespace

cudaError_t postconv(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream) {
  LaunchCheck chk("postconv");
  chk.in_range(p.Dk, 1, kMaxD, "Dk").in_range(p.Dv, 1, kMaxD, "Dv").in_range(p.Hk, 1, INT32_MAX, "Hk");
  chk.in_range(p.Hv, 1, INT32_MAX, "Hv").require(p.Hk < 1 || p.Hv % p.Hk == 0, "Hv must be a multiple of Hk");
  chk.in_range(p.T, 0, INT32_MAX, "T");
  chk.require(float_type(p.conv_dtype) && float_type(p.ab_dtype) && float_type(p.qkv_dtype),
              "conv_dtype, ab_dtype and qkv_dtype must be bf16 or f32");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  // The contract must cover every token (it may cover more: a padded bucket; kernels skip t >= T).
  const int64_t covered = static_cast<int64_t>(c.grid.x) * (c.arm == PostconvArm::token_tile ? kPostconvTokenTile : 1);
  chk.require(covered >= p.T, "the contract: its grid covers fewer tokens than T");
  chk.require(c.arm != PostconvArm::token_tile || (p.Dk == 128 && p.Dv == 128), "token_tile needs Dk = Dv = 128");
  if (!chk.ok()) return cudaErrorInvalidValue;
  // Heads, block and shared memory must be the contract's for these params (the kernels map block
  // indices to heads from the params).
  try {
    const int bucket = c.arm == PostconvArm::token_tile ? static_cast<int>(covered) : static_cast<int>(c.grid.x);
    const auto want = postconv_contract(c.arm, PostconvShape{bucket, p.Hk, p.Hv, p.Dk, p.Dv});
    chk.require(want.arm == c.arm && want.grid == c.grid && want.block == c.block && want.smem_bytes == c.smem_bytes,
                "the contract: it is not the one postconv_contract gives for these params");
    if (!chk.ok()) return cudaErrorInvalidValue;
  } catch (const std::exception& e) {
    chk.require(false, std::string("its shape: ") + e.what());
    return cudaErrorInvalidValue;
  }

  const auto then_last = [](cudaError_t e) { return e != cudaSuccess ? e : cudaGetLastError(); };
  switch (c.arm) {  // closed: an arm without a case does not compile (-Werror=switch)
    case PostconvArm::megablock:
      launch_kernel(postconv_megablock_kernel, to_dim3(c.grid), to_dim3(c.block), c.smem_bytes, stream, p);
      return cudaGetLastError();
    case PostconvArm::fast:
      launch_kernel(postconv_fast_kernel, to_dim3(c.grid), to_dim3(c.block), c.smem_bytes, stream, p);
      return cudaGetLastError();
    case PostconvArm::split: return then_last(launch_split(p, c, stream));
    case PostconvArm::token_tile: return then_last(launch_token_tile(p, c, stream));
  }
  chk.require(false, "the contract: its arm is not one of the op's arms");
  return cudaErrorInvalidValue;
}

}  // namespace sg
