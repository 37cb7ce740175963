// conv_update.cu: decode conv update kernels (arms `grid` and `fast`).
#include "kernels/conv_update.h"
#include "kernels/device_util.cuh"

namespace sg {
namespace {

constexpr int kMaxK = 8;

// One (row, channel): read the K-1 state taps, the new input, accumulate in tap order, roll.
__device__ __forceinline__ void conv_update_one(const ConvUpdateParams& p, int r, int c) {
  const int slot = p.slots[r];
  if (slot < 0) {
    dev::store(p.out, p.out_dtype, static_cast<int64_t>(r) * p.C + c, 0.0f);
    return;
  }
  const int km1 = p.K - 1;
  const int64_t s0 = (static_cast<int64_t>(slot) * p.C + c) * km1;
  float acc = p.bias ? p.bias[c] : 0.0f;
  for (int j = 0; j < km1; ++j) acc = fmaf(p.w[c * p.K + j], dev::load(p.state, p.state_dtype, s0 + j), acc);
  const float xv = dev::load(p.x, p.x_dtype, static_cast<int64_t>(r) * p.x_stride + c);
  acc = fmaf(p.w[c * p.K + km1], xv, acc);
  dev::store(p.out, p.out_dtype, static_cast<int64_t>(r) * p.C + c, p.silu ? dev::silu(acc) : acc);
  for (int j = 0; j + 1 < km1; ++j) dev::copy(p.state, p.state_dtype, s0 + j, p.state, p.state_dtype, s0 + j + 1);
  if (km1 > 0) dev::store(p.state, p.state_dtype, s0 + km1 - 1, xv);
}

// Reference arm: grid-stride loop over rows * C.
__global__ void conv_update_grid_kernel(const ConvUpdateParams p) {
  const int64_t n = static_cast<int64_t>(p.rows) * p.C;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    conv_update_one(p, static_cast<int>(i / p.C), static_cast<int>(i % p.C));
  }
}

// Fast arm: grid (channel tiles, rows); the K-1 state taps are read once into registers, then
// the same accumulation; the rolled state is written from registers.
__global__ void conv_update_fast_kernel(const ConvUpdateParams p) {
  const int r = blockIdx.y;
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= p.C) return;
  const int slot = p.slots[r];
  if (slot < 0) {
    dev::store(p.out, p.out_dtype, static_cast<int64_t>(r) * p.C + c, 0.0f);
    return;
  }
  const int km1 = p.K - 1;
  const int64_t s0 = (static_cast<int64_t>(slot) * p.C + c) * km1;
  float taps[kMaxK];
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j) taps[j] = j < km1 ? dev::load(p.state, p.state_dtype, s0 + j) : 0.0f;
  const float xv = dev::load(p.x, p.x_dtype, static_cast<int64_t>(r) * p.x_stride + c);
  float acc = p.bias ? p.bias[c] : 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxK - 1; ++j) {
    if (j < km1) acc = fmaf(p.w[c * p.K + j], taps[j], acc);
  }
  acc = fmaf(p.w[c * p.K + km1], xv, acc);
  dev::store(p.out, p.out_dtype, static_cast<int64_t>(r) * p.C + c, p.silu ? dev::silu(acc) : acc);
#pragma unroll
  for (int j = 0; j < kMaxK - 2; ++j) {
    if (j + 1 < km1) dev::store(p.state, p.state_dtype, s0 + j, taps[j + 1]);
  }
  if (km1 > 0) dev::store(p.state, p.state_dtype, s0 + km1 - 1, xv);
}

dim3 to_dim3(const Dim3& d) { return dim3(d.x, d.y, d.z); }

}  // namespace

cudaError_t conv_update(const ConvUpdateParams& p, const LaunchContract<ConvUpdateArm>& c, cudaStream_t stream) {
  if (p.K < 1 || p.K > kMaxK) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  // The contract must be the one for these params: the fast arm maps blockIdx.y to the row.
  try {
    const auto want = conv_update_contract(c.arm, ConvUpdateShape{p.rows, p.C, p.K});
    if (!(want.grid == c.grid) || !(want.block == c.block) || want.smem_bytes != c.smem_bytes) return cudaErrorInvalidValue;
  } catch (const std::exception&) {
    return cudaErrorInvalidValue;
  }
  std::array<std::function<void(const LaunchContract<ConvUpdateArm>&)>, 2> by_arm;
  by_arm[static_cast<size_t>(ConvUpdateArm::grid)] = [&](const auto& k) {
    conv_update_grid_kernel<<<to_dim3(k.grid), to_dim3(k.block), k.smem_bytes, stream>>>(p);
  };
  by_arm[static_cast<size_t>(ConvUpdateArm::fast)] = [&](const auto& k) {
    conv_update_fast_kernel<<<to_dim3(k.grid), to_dim3(k.block), k.smem_bytes, stream>>>(p);
  };
  try {
    dispatch(c, by_arm);
  } catch (const std::exception&) {
    return cudaErrorNotSupported;
  }
  return cudaGetLastError();
}

}  // namespace sg
