// gdn_decode_prep.cu: conv update + post-conv of one decode token in one kernel (see
// gdn_decode_prep.h and the prep arm in contracts.h). Block (k-head hk, row r), 128 threads:
//   before the dependency wait: thread t holds channels u = t, t + 128, .. (< 2 Dk + ratio Dv; q
//     then k of head hk, then the v channels of v-heads hk ratio ..) with their K weights, bias and
//     K-1 state taps in registers;
//   then each channel's conv exactly as conv.update (conv_channel in gdn_decode_fused.cu), its state
//     rolled; q and k conv outputs into shared memory, v conv outputs stored as v; the gates of the
//     block's v-heads (postconv_common.cuh's formulas);
//   then warps 0 and 1 normalise q and k with post-conv's one-warp tree (warp_l2norm_row: the
//     reference tree's additions) and store them.
#include "kernels/device_util.cuh"
#include "kernels/gdn_decode_prep.h"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"
#include "kernels/postconv_common.cuh"

namespace sg {
namespace {

constexpr int kThreads = kGdnDecodePrepThreads;
constexpr int kPer = kGdnDecodePrepPerThread;

__device__ __forceinline__ float round_act(float v, DType t) {
  return t == DType::bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

// The conv channel of the block's u-th channel: q of head hk, k of head hk, then the v channels from v0.
__device__ __forceinline__ int64_t channel(int u, int hk, int Dk, int Hk, int64_t v0) {
  return u < Dk ? int64_t{hk} * Dk + u : u < 2 * Dk ? int64_t{Hk + hk} * Dk + (u - Dk) : v0 + (u - 2 * Dk);
}

// KC: the conv's taps (K).
template <int KC>
__global__ void __launch_bounds__(kThreads) gdn_decode_prep_kernel(const GdnDecodePrepParams p) {
  constexpr int H = KC - 1;      // state taps a channel
  __shared__ float qk[2 * 256];  // conv outputs of head hk's q channels, then its k channels (Dk <= 256)
  const int hk = blockIdx.x, r = blockIdx.y, t = threadIdx.x;
  const int ratio = p.Hv / p.Hk, Dk = p.Dk;
  const int nch = 2 * Dk + ratio * p.Dv;
  const int64_t C = 2 * int64_t{p.Hk} * Dk + int64_t{p.Hv} * p.Dv;
  const int64_t v0 = 2 * int64_t{p.Hk} * Dk + int64_t{hk} * ratio * p.Dv;  // the block's first v channel

  // Before the wait: the slot (step metadata), weights and bias, and the channels' conv state.
  const int slot = p.slots[r];
  float w[kPer][KC], bias[kPer], s[kPer][H];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int u = t + i * kThreads;
    if (u >= nch) continue;
    const int64_t c = channel(u, hk, Dk, p.Hk, v0);
#pragma unroll
    for (int d = 0; d < KC; ++d) w[i][d] = p.w[c * KC + d];
    bias[i] = p.bias ? p.bias[c] : 0.0f;
    if (slot >= 0) {
#pragma unroll
      for (int j = 0; j < H; ++j) s[i][j] = dev::load(p.conv_state, p.conv_state_dtype, (slot * C + c) * H + j);
    }
  }
  pdl_start();  // kernels/launch.cuh: x, a and b are the previous kernels' (wait, then let the delta rule launch)

#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int u = t + i * kThreads;
    if (u >= nch) continue;
    float y = 0.0f;  // a padding row's conv output (conv.update writes zeros and leaves the state)
    if (slot >= 0) {
      const int64_t c = channel(u, hk, Dk, p.Hk, v0);
      const int64_t s0 = (slot * C + c) * H;
      float acc = bias[i];
#pragma unroll
      for (int j = 0; j < H; ++j) acc = fmaf(w[i][j], s[i][j], acc);
      const float xv = dev::load(p.x, p.act, static_cast<int64_t>(r) * p.x_stride + c);
      acc = fmaf(w[i][H], xv, acc);
#pragma unroll
      for (int j = 0; j + 1 < H; ++j) dev::store(p.conv_state, p.conv_state_dtype, s0 + j, s[i][j + 1]);
      if (H > 0) dev::store(p.conv_state, p.conv_state_dtype, s0 + H - 1, xv);
      y = round_act(dev::silu(acc), p.act);
    }
    if (u < 2 * Dk) {
      qk[u] = y;
    } else {
      dev::store(p.v, p.act, static_cast<int64_t>(r) * p.Hv * p.Dv + int64_t{hk} * ratio * p.Dv + (u - 2 * Dk), y);
    }
  }
  for (int i = t; i < ratio; i += kThreads) {  // the gates of v-heads hk ratio .. (padding rows too, as post-conv)
    const int hv = hk * ratio + i;
    const float av = dev::load(p.a, p.act, static_cast<int64_t>(r) * p.a_stride + hv);
    const float bv = dev::load(p.b, p.act, static_cast<int64_t>(r) * p.b_stride + hv);
    p.beta[static_cast<int64_t>(r) * p.Hv + hv] = postconv_detail::gate_beta(bv);
    p.g[static_cast<int64_t>(r) * p.Hv + hv] = postconv_detail::gate_g(av, p.A_log[hv], p.dt_bias[hv]);
  }
  __syncthreads();  // q and k conv outputs in shared memory
  const int warp = t >> 5, lane = t & 31;
  if (warp < 2) {  // q (warp 0) and k (warp 1) of head hk: post-conv's one-warp tree, rounded once
    postconv_detail::warp_l2norm_row(qk, DType::f32, warp * Dk, warp == 0 ? p.q : p.k, p.act,
                                     (static_cast<int64_t>(r) * p.Hk + hk) * Dk, Dk, lane);
  }
}

template <int KC>
cudaError_t launch(const GdnDecodePrepParams& p, cudaStream_t stream) {
  launch_kernel(gdn_decode_prep_kernel<KC>, dim3(static_cast<unsigned>(p.Hk), static_cast<unsigned>(p.rows)),
                dim3(kThreads), 0, stream, p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t gdn_decode_prep(const GdnDecodePrepParams& p, cudaStream_t stream) {
  LaunchCheck chk("gdn.decode (prep)");
  chk.require(gdn_decode_prep_fits(p.Hk, p.Hv, p.Dk, p.Dv, p.K),
              "the shape: Dk <= 256, at most 1024 conv channels a k-head (2 Dk + Hv/Hk Dv), K in 2..8, Hv a "
              "multiple of Hk");
  chk.require(p.act == DType::f32 || p.act == DType::bf16, "act must be f32 or bf16");
  chk.require(p.conv_state_dtype == DType::f32 || p.conv_state_dtype == DType::bf16,
              "conv_state_dtype must be f32 or bf16");
  chk.require(
      p.x && p.a && p.b && p.conv_state && p.w && p.A_log && p.dt_bias && p.slots && p.q && p.k && p.v && p.g && p.beta,
      "a pointer is null");
  chk.in_range(p.rows, 0, 65535, "rows");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  switch (p.K) {
    case 2: return launch<2>(p, stream);
    case 3: return launch<3>(p, stream);
    case 4: return launch<4>(p, stream);
    case 5: return launch<5>(p, stream);
    case 6: return launch<6>(p, stream);
    case 7: return launch<7>(p, stream);
    case 8: return launch<8>(p, stream);
    default: chk.require(false, "K must be in 2..8"); return cudaErrorInvalidValue;
  }
}

}  // namespace sg
