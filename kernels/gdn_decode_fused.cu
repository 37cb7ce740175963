// gdn_decode_fused.cu: see gdn_decode_fused.h. Phases inside one block (sequence r, k-head h):
//   1. conv: every thread takes channels of {q head h, k head h, v heads h*ratio ..}; taps in the
//      contract's order, SiLU, one rounding to act; the rolled state is written by this block only.
//   2. post-conv: the shared-memory trees for q and k (the reference tree), q and k rounded to act,
//      q scaled by 1/sqrt(Dk); beta and g of the block's v-heads.
//   3. the delta-rule step: thread t -> v-head h*ratio + t / Dv, column t % Dv.
#include "kernels/delta_rule_device.cuh"
#include "kernels/device_util.cuh"
#include "kernels/gdn_decode_fused.h"
#include "kernels/launch.cuh"

namespace sg {
namespace {

__device__ __forceinline__ float round_act(float v, DType t) {
  return t == DType::bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

template <int DK, int Q>
__global__ void __launch_bounds__(kGdnDecodeFusedMaxThreads) gdn_decode_fused_kernel(const GdnDecodeFusedParams p) {
  pdl_start();  // kernels/launch.cuh
  extern __shared__ float sm[];
  float* qraw = sm;         // [DK]
  float* kraw = qraw + DK;  // [DK]
  float* qs = kraw + DK;    // [DK] q (rounded) / sqrt(Dk)
  float* ks = qs + DK;      // [DK] k (rounded)
  float* tq = ks + DK;      // [DK] tree for q
  float* tk = tq + DK;      // [DK] tree for k
  const int ratio = p.Hv / p.Hk;
  float* vraw = tk + DK;            // [ratio * Dv]
  float* gs = vraw + ratio * p.Dv;  // [ratio]
  float* betas = gs + ratio;        // [ratio]

  const int h = blockIdx.x, r = blockIdx.y, t = threadIdx.x, nt = blockDim.x;
  const int slot = p.slots[r];
  const int hv0 = h * ratio;
  if (slot < 0) {
    const int64_t o = (static_cast<int64_t>(r) * p.Hv + hv0) * p.Dv;
    for (int i = t; i < ratio * p.Dv; i += nt) dev::store(p.out, p.act, o + i, 0.0f);
    return;
  }
  const int C = 2 * p.Hk * DK + p.Hv * p.Dv;
  const int km1 = p.K - 1;

  // 1. conv over this block's 2*DK + ratio*Dv channels.
  const int nch = 2 * DK + ratio * p.Dv;
  for (int i = t; i < nch; i += nt) {
    int c;
    float* dst;
    if (i < DK) {
      c = h * DK + i;
      dst = qraw + i;
    } else if (i < 2 * DK) {
      c = p.Hk * DK + h * DK + (i - DK);
      dst = kraw + (i - DK);
    } else {
      c = 2 * p.Hk * DK + hv0 * p.Dv + (i - 2 * DK);
      dst = vraw + (i - 2 * DK);
    }
    const int64_t s0 = (static_cast<int64_t>(slot) * C + c) * km1;
    float acc = p.bias ? p.bias[c] : 0.0f;
    for (int j = 0; j < km1; ++j) {
      acc = fmaf(p.w[c * p.K + j], dev::load(p.conv_state, p.conv_state_dtype, s0 + j), acc);
    }
    const float xv = dev::load(p.x, p.act, static_cast<int64_t>(r) * p.x_stride + c);
    acc = fmaf(p.w[c * p.K + km1], xv, acc);
    *dst = round_act(dev::silu(acc), p.act);
    for (int j = 0; j + 1 < km1; ++j) {
      dev::copy(p.conv_state, p.conv_state_dtype, s0 + j, p.conv_state, p.conv_state_dtype, s0 + j + 1);
    }
    if (km1 > 0) dev::store(p.conv_state, p.conv_state_dtype, s0 + km1 - 1, xv);
  }
  __syncthreads();

  // 2. post-conv: the reference trees (s[i] += s[i + h2] for h2 = DK/2 .. 1) for q and k.
  for (int i = t; i < DK; i += nt) {
    tq[i] = qraw[i] * qraw[i];
    tk[i] = kraw[i] * kraw[i];
  }
  __syncthreads();
  for (int h2 = DK / 2; h2 >= 1; h2 /= 2) {
    for (int i = t; i < h2; i += nt) {
      tq[i] = tq[i] + tq[i + h2];
      tk[i] = tk[i] + tk[i + h2];
    }
    __syncthreads();
  }
  const float inv_q = 1.0f / sqrtf(tq[0] + 1e-6f), inv_k = 1.0f / sqrtf(tk[0] + 1e-6f);
  const float scale = 1.0f / sqrtf(static_cast<float>(DK));
  for (int i = t; i < DK; i += nt) {
    qs[i] = round_act(qraw[i] * inv_q, p.act) * scale;
    ks[i] = round_act(kraw[i] * inv_k, p.act);
  }
  for (int e = t; e < ratio; e += nt) {
    const int hv = hv0 + e;
    const float av = dev::load(p.a, p.act, static_cast<int64_t>(r) * p.a_stride + hv);
    const float bv = dev::load(p.b, p.act, static_cast<int64_t>(r) * p.b_stride + hv);
    betas[e] = 1.0f / (1.0f + expf(-bv));
    gs[e] = -expf(p.A_log[hv]) * dev::softplus(av + p.dt_bias[hv]);
  }
  __syncthreads();

  // 3. the recurrent step: Q consecutive threads per state column (block = Dv * Q threads), one
  //    v-head of the group after the other.
  const int j = t / Q;
  for (int e = 0; e < ratio; ++e) {
    const int hv = hv0 + e;
    float* S = p.ssm_state + (static_cast<int64_t>(slot) * p.Hv + hv) * DK * p.Dv + j;
    const float o = dev::delta_rule_column<DK, Q>(S, p.Dv, ks, qs, expf(gs[e]), betas[e], vraw[e * p.Dv + j], true);
    if (t % Q == 0) dev::store(p.out, p.act, (static_cast<int64_t>(r) * p.Hv + hv) * p.Dv + j, o);
  }
}

}  // namespace

cudaError_t gdn_decode_fused(const GdnDecodeFusedParams& p, const LaunchContract<GdnDecodeArm>& c,
                             cudaStream_t stream) {
  if (c.arm != GdnDecodeArm::fused || p.Dv < 1 || p.Hk < 1) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  // The contract must be the one for these params (shared memory is sized from them).
  try {
    const auto want = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{p.rows, p.Hk, p.Hv, p.Dk, p.Dv, p.K});
    if (want.arm != GdnDecodeArm::fused || !(want.grid == c.grid) || !(want.block == c.block) ||
        want.smem_bytes != c.smem_bytes) {
      return cudaErrorInvalidValue;
    }
  } catch (const std::exception&) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(c.grid.x, c.grid.y, c.grid.z), block(c.block.x, c.block.y, c.block.z);
  const int q = static_cast<int>(c.block.x) / p.Dv;
  switch (p.Dk * 100 + q) {
    case 6401: launch_kernel(gdn_decode_fused_kernel<64, 1>, grid, block, c.smem_bytes, stream, p); break;
    case 6402: launch_kernel(gdn_decode_fused_kernel<64, 2>, grid, block, c.smem_bytes, stream, p); break;
    case 6404: launch_kernel(gdn_decode_fused_kernel<64, 4>, grid, block, c.smem_bytes, stream, p); break;
    case 12801: launch_kernel(gdn_decode_fused_kernel<128, 1>, grid, block, c.smem_bytes, stream, p); break;
    case 12802: launch_kernel(gdn_decode_fused_kernel<128, 2>, grid, block, c.smem_bytes, stream, p); break;
    case 12804: launch_kernel(gdn_decode_fused_kernel<128, 4>, grid, block, c.smem_bytes, stream, p); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace sg
