// postconv.cu: post-conv prep kernels. The sum of squares is a shared-memory tree over P = the
// next power of two >= Dk (zeros beyond Dk): s[i] += s[i + h] for h = P/2 .. 1. For Dk = 128
// that is the contract's "i + 64, then 32, 16, 8, 4, 2, 1"; every arm must reproduce it.
#include "kernels/device_util.cuh"
#include "kernels/postconv.h"

namespace sg {
namespace {

constexpr int kMaxD = 256;

__device__ __forceinline__ int next_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Normalises one head of `Dk` features read at conv[t, col0 ..] into out[t, h, :], using `lanes`
// threads starting at `lane` and the shared array s[P]. All threads of the block must call it
// (it synchronises).
__device__ void l2norm_head(const PostconvParams& p, int t, int col0, void* out, int h, float* s, int lane,
                            int lanes) {
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
  for (int i = lane; i < p.Dk; i += lanes) dev::store(out, p.qkv_dtype, o0 + i, dev::load(p.conv, p.conv_dtype, in0 + i) * inv);
}

__device__ __forceinline__ void gates_one(const PostconvParams& p, int t, int hv) {
  const float a = dev::load(p.a, p.ab_dtype, static_cast<int64_t>(t) * p.a_stride + hv);
  const float b = dev::load(p.b, p.ab_dtype, static_cast<int64_t>(t) * p.b_stride + hv);
  p.beta[static_cast<int64_t>(t) * p.Hv + hv] = 1.0f / (1.0f + expf(-b));
  p.g[static_cast<int64_t>(t) * p.Hv + hv] = -expf(p.A_log[hv]) * dev::softplus(a + p.dt_bias[hv]);
}

// Reference arm: grid (T, Hk + 1), 256 threads. Blocks h < Hk: threads 0..127 normalise q head h,
// 128..255 k head h, each half with its own tree. Block Hk copies all of v and computes all gates.
__global__ void postconv_megablock_kernel(const PostconvParams p) {
  __shared__ float s[2][kMaxD];
  const int t = blockIdx.x, h = blockIdx.y;
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

// Fast arm: same grid, 128 threads: q head then k head one after the other, each over all 128
// threads with the same tree; v copied with 16-byte vectors when aligned (bf16 -> bf16, f32 -> f32).
__global__ void postconv_fast_kernel(const PostconvParams p) {
  __shared__ float s[kMaxD];
  const int t = blockIdx.x, h = blockIdx.y;
  if (h < p.Hk) {
    l2norm_head(p, t, h * p.Dk, p.q, h, s, threadIdx.x, blockDim.x);
    __syncthreads();  // s is reused
    l2norm_head(p, t, p.Hk * p.Dk + h * p.Dk, p.k, h, s, threadIdx.x, blockDim.x);
    return;
  }
  const int v0 = 2 * p.Hk * p.Dk, nv = p.Hv * p.Dv;
  const char* src = static_cast<const char*>(p.conv) +
                    (static_cast<int64_t>(t) * p.conv_stride + v0) * static_cast<int64_t>(dtype_size(p.conv_dtype));
  char* dst = static_cast<char*>(p.v) + static_cast<int64_t>(t) * nv * static_cast<int64_t>(dtype_size(p.qkv_dtype));
  const int64_t bytes = static_cast<int64_t>(nv) * static_cast<int64_t>(dtype_size(p.qkv_dtype));
  if (p.conv_dtype == p.qkv_dtype && (reinterpret_cast<uintptr_t>(src) % 16) == 0 &&
      (reinterpret_cast<uintptr_t>(dst) % 16) == 0 && bytes % 16 == 0) {
    for (int64_t i = threadIdx.x; i < bytes / 16; i += blockDim.x) {
      reinterpret_cast<int4*>(dst)[i] = reinterpret_cast<const int4*>(src)[i];
    }
  } else {
    for (int i = threadIdx.x; i < nv; i += blockDim.x) {
      dev::copy(p.v, p.qkv_dtype, static_cast<int64_t>(t) * nv + i, p.conv, p.conv_dtype,
                static_cast<int64_t>(t) * p.conv_stride + v0 + i);
    }
  }
  for (int hv = threadIdx.x; hv < p.Hv; hv += blockDim.x) gates_one(p, t, hv);
}

dim3 to_dim3(const Dim3& d) { return dim3(d.x, d.y, d.z); }

}  // namespace

cudaError_t postconv(const PostconvParams& p, const LaunchContract<PostconvArm>& c, cudaStream_t stream) {
  if (p.Dk < 1 || p.Dk > kMaxD || p.Dv < 1 || p.Hk < 1 || p.Hv % p.Hk != 0) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  std::array<std::function<void(const LaunchContract<PostconvArm>&)>, 4> by_arm;
  by_arm[static_cast<size_t>(PostconvArm::megablock)] = [&](const auto& k) {
    postconv_megablock_kernel<<<to_dim3(k.grid), to_dim3(k.block), k.smem_bytes, stream>>>(p);
  };
  by_arm[static_cast<size_t>(PostconvArm::fast)] = [&](const auto& k) {
    postconv_fast_kernel<<<to_dim3(k.grid), to_dim3(k.block), k.smem_bytes, stream>>>(p);
  };
  // split and token_tile: not implemented yet (issue 3); dispatch() reports an empty slot.
  dispatch(c, by_arm);
  return cudaGetLastError();
}

}  // namespace sg
