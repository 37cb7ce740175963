// delta_rule.cu: recurrent gated delta rule, decode step.
#include "kernels/delta_rule.h"
#include "kernels/delta_rule_device.cuh"
#include "kernels/device_util.cuh"

namespace sg {
namespace {

template <int DK>
__global__ void delta_rule_decode_kernel(const DeltaRuleDecodeParams p) {
  __shared__ float ks[DK], qs[DK];
  const int hv = blockIdx.x, r = blockIdx.y, j = threadIdx.x;
  const int slot = p.slots[r];
  const int64_t orow = (static_cast<int64_t>(r) * p.Hv + hv) * p.Dv;
  if (slot < 0) {
    if (j < p.Dv) dev::store(p.out, p.out_dtype, orow + j, 0.0f);
    return;
  }
  const int hk = hv / (p.Hv / p.Hk);
  const float scale = 1.0f / sqrtf(static_cast<float>(DK));
  const int64_t qk0 = (static_cast<int64_t>(r) * p.Hk + hk) * DK;
  for (int i = threadIdx.x; i < DK; i += blockDim.x) {
    ks[i] = dev::load(p.k, p.qkv_dtype, qk0 + i);
    qs[i] = dev::load(p.q, p.qkv_dtype, qk0 + i) * scale;
  }
  __syncthreads();
  if (j >= p.Dv) return;
  const float decay = expf(p.g[static_cast<int64_t>(r) * p.Hv + hv]);
  const float beta = p.beta[static_cast<int64_t>(r) * p.Hv + hv];
  float* S = p.state + (static_cast<int64_t>(slot) * p.Hv + hv) * DK * p.Dv + j;  // column j, stride Dv
  const float o = dev::delta_rule_column<DK>(S, p.Dv, ks, qs, decay, beta, dev::load(p.v, p.qkv_dtype, orow + j));
  dev::store(p.out, p.out_dtype, orow + j, o);
}

}  // namespace

bool delta_rule_decode_supports(int Dk, int Dv) {
  return (Dk == 16 || Dk == 32 || Dk == 64 || Dk == 128) && Dv >= 1 && Dv <= 1024;
}

cudaError_t delta_rule_decode(const DeltaRuleDecodeParams& p, cudaStream_t stream) {
  if (!delta_rule_decode_supports(p.Dk, p.Dv) || p.Hk < 1 || p.Hv % p.Hk != 0) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  const dim3 grid(p.Hv, p.rows), block((p.Dv + 31) / 32 * 32);
  switch (p.Dk) {
    case 16: delta_rule_decode_kernel<16><<<grid, block, 0, stream>>>(p); break;
    case 32: delta_rule_decode_kernel<32><<<grid, block, 0, stream>>>(p); break;
    case 64: delta_rule_decode_kernel<64><<<grid, block, 0, stream>>>(p); break;
    case 128: delta_rule_decode_kernel<128><<<grid, block, 0, stream>>>(p); break;
  }
  return cudaGetLastError();
}

}  // namespace sg
