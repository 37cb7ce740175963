// gdn_decode_fused.cu: see gdn_decode_fused.h and gdn_decode_contract in contracts.h. Block
// (v-head hv, column block cb_i, row r) in a cluster of the n = Hv/Hk * col_blocks blocks of k-head
// hk = hv / (Hv/Hk) (rank = blockIdx.x % n):
//   1. conv: q/k channels i = rank, rank + n, .. of the head (2*Dk of them) and the block's v
//      columns; taps in the contract's order, SiLU, one rounding to act; each channel's rolled state
//      is read and written by its owner only. q/k outputs go to every block of the cluster.
//   2. cluster barrier; the block's state columns are loaded into registers; post-conv: the
//      reference trees for q and k (every block computes the same), q and k rounded to act, q
//      scaled by 1/sqrt(Dk); beta and g of hv.
//   3. the recurrent step of the block's columns (dev::delta_rule_step, as delta_rule.decode).
#include <cooperative_groups.h>

#include "kernels/delta_rule_device.cuh"
#include "kernels/device_util.cuh"
#include "kernels/gdn_decode_fused.h"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

namespace cg = cooperative_groups;

__device__ __forceinline__ float round_act(float v, DType t) {
  return t == DType::bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

// One conv channel c of row r at state slot `slot` (K taps): returns the rounded SiLU output and
// rolls the channel's state. The arithmetic of conv.update.
__device__ __forceinline__ float conv_channel(const GdnDecodeFusedParams& p, int r, int slot, int C, int c) {
  const int km1 = p.K - 1;
  const int64_t s0 = (static_cast<int64_t>(slot) * C + c) * km1;
  float acc = p.bias ? p.bias[c] : 0.0f;
  for (int j = 0; j < km1; ++j) acc = fmaf(p.w[c * p.K + j], dev::load(p.conv_state, p.conv_state_dtype, s0 + j), acc);
  const float xv = dev::load(p.x, p.act, static_cast<int64_t>(r) * p.x_stride + c);
  acc = fmaf(p.w[c * p.K + km1], xv, acc);
  for (int j = 0; j + 1 < km1; ++j) {
    dev::copy(p.conv_state, p.conv_state_dtype, s0 + j, p.conv_state, p.conv_state_dtype, s0 + j + 1);
  }
  if (km1 > 0) dev::store(p.conv_state, p.conv_state_dtype, s0 + km1 - 1, xv);
  return round_act(dev::silu(acc), p.act);
}

// ST: the SSM state's element type (float or __nv_bfloat16, p.ssm_state_dtype).
template <int DK, int Q, typename ST>
__global__ void __launch_bounds__(Q == 1 ? 256 : 512)  // delta_rule_max_threads(Q)
    gdn_decode_fused_kernel(const GdnDecodeFusedParams p, const int cb) {
  // Every block of the cluster must have started before any writes into its shared memory.
  dev::cluster_arrive_relaxed();
  pdl_start();  // kernels/launch.cuh
  extern __shared__ float sm[];
  float* qraw = sm;         // [DK] conv output of the head's q channels (written by every block)
  float* kraw = qraw + DK;  // [DK] and k channels
  float* qs = kraw + DK;    // [DK] q (rounded) / sqrt(Dk)
  float* ks = qs + DK;      // [DK] k (rounded)
  float* tq = ks + DK;      // [DK] tree for q
  float* tk = tq + DK;      // [DK] tree for k
  float* vs = tk + DK;      // [cols] conv output of this block's v columns

  const cg::cluster_group cluster = cg::this_cluster();
  const int n = static_cast<int>(cluster.num_blocks()), rank = static_cast<int>(cluster.block_rank());
  const int ratio = p.Hv / p.Hk, cols = p.Dv / cb;
  const int hv = blockIdx.x / cb, cbi = blockIdx.x % cb, hk = hv / ratio, r = blockIdx.y;
  const int t = threadIdx.x, nt = blockDim.x;
  const int jl = t / Q, j = cbi * cols + jl;  // this thread's state column
  const bool active = jl < cols;
  const int64_t orow = (static_cast<int64_t>(r) * p.Hv + hv) * p.Dv;
  const int slot = p.slots[r];  // the same row for the whole cluster: all return here or none
  if (slot < 0) {
    dev::cluster_wait();
    if (active && t % Q == 0) dev::store(p.out, p.act, orow + j, 0.0f);
    return;
  }

  // The block's state columns (the Dk/Q rows of this lane's part, widened to f32), loaded after the conv.
  constexpr int R = DK / Q;
  ST* S = static_cast<ST*>(p.ssm_state) + (static_cast<int64_t>(slot) * p.Hv + hv) * DK * p.Dv + (active ? j : 0);
  const float av = dev::load(p.a, p.act, static_cast<int64_t>(r) * p.a_stride + hv);
  const float bv = dev::load(p.b, p.act, static_cast<int64_t>(r) * p.b_stride + hv);

  // 1. conv: nqk owned q/k channels, then the block's v columns.
  const int C = 2 * p.Hk * DK + p.Hv * p.Dv;
  const int nqk = (2 * DK - rank + n - 1) / n;
  dev::cluster_wait();  // the start barrier: every block of the cluster runs
  for (int u = t; u < nqk + cols; u += nt) {
    if (u < nqk) {
      const int i = rank + n * u;  // channel of the head's q (i < Dk) or k
      const int c = i < DK ? hk * DK + i : p.Hk * DK + hk * DK + (i - DK);
      const float y = conv_channel(p, r, slot, C, c);
      float* dst = i < DK ? qraw + i : kraw + (i - DK);
      for (int b = 0; b < n; ++b) *cluster.map_shared_rank(dst, b) = y;
    } else {
      const int jv = u - nqk;
      vs[jv] = conv_channel(p, r, slot, C, 2 * p.Hk * DK + hv * p.Dv + cbi * cols + jv);
    }
  }
  dev::cluster_arrive_release();
  dev::cluster_wait();  // every block's q/k outputs are in this block's qraw and kraw; no remote access after
  // Loaded here, the state's loads run under the post-conv below. (Issued before the conv, they
  // delayed its loads and the cluster barrier: 65.4 against 56.6 us at 4B b=32, BENCHMARKS.md.)
  float s[R];
  dev::load_column<DK, Q>(s, S, p.Dv, active);

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
  const float beta = 1.0f / (1.0f + expf(-bv));
  const float g = -expf(p.A_log[hv]) * dev::softplus(av + p.dt_bias[hv]);
  __syncthreads();

  // 3. the recurrent step on the state in registers.
  const float v = active ? vs[jl] : 0.0f;
  const float o = dev::delta_rule_step<DK, Q>(s, ks, qs, expf(g), beta, v);
  dev::store_column<DK, Q>(s, S, p.Dv, active);
  if (active && t % Q == 0) dev::store(p.out, p.act, orow + j, o);
}

}  // namespace

cudaError_t gdn_decode_fused(const GdnDecodeFusedParams& p, const LaunchContract<GdnDecodeArm>& c,
                             cudaStream_t stream) {
  LaunchCheck chk("gdn.decode (fused)");
  chk.require(c.arm == GdnDecodeArm::fused, "the contract: its arm is not fused (the contract fell back)");
  chk.in_range(p.Dv, 1, INT32_MAX, "Dv").in_range(p.Hk, 1, INT32_MAX, "Hk");
  chk.require(p.Hk < 1 || p.Hv % p.Hk == 0, "Hv must be a multiple of Hk");
  chk.require(p.ssm_state_dtype == DType::f32 || p.ssm_state_dtype == DType::bf16,
              "ssm_state_dtype must be f32 or bf16");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  // The contract must be the one for these params (the kernel derives its columns from the grid).
  try {
    const auto want = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{p.rows, p.Hk, p.Hv, p.Dk, p.Dv, p.K});
    chk.require(want.arm == GdnDecodeArm::fused && want.grid == c.grid && want.block == c.block &&
                    want.cluster == c.cluster && want.smem_bytes == c.smem_bytes,
                "the contract: it is not the one gdn_decode_contract gives for these params");
    if (!chk.ok()) return cudaErrorInvalidValue;
  } catch (const std::exception& e) {
    chk.require(false, std::string("its shape: ") + e.what());
    return cudaErrorInvalidValue;
  }
  const dim3 grid(c.grid.x, c.grid.y, c.grid.z), block(c.block.x, c.block.y, c.block.z);
  const int cb = static_cast<int>(c.grid.x) / p.Hv;
  const int q = delta_rule_decode_split(p.Dk, p.Dv);
  const unsigned n = c.cluster.x;
  const auto go = [&](auto kernel) {
    return launch_kernel_cluster(kernel, grid, block, c.smem_bytes, stream, n, p, cb);
  };
  // The same grid, block, cluster and shared memory for both state dtypes.
  const auto pick = [&](auto st) -> cudaError_t {
    using ST = decltype(st);
    switch (p.Dk * 100 + q) {  // the (Dk, split) pairs the contract lets through
      case 6401: return go(gdn_decode_fused_kernel<64, 1, ST>);
      case 6404: return go(gdn_decode_fused_kernel<64, 4, ST>);
      case 12801: return go(gdn_decode_fused_kernel<128, 1, ST>);
      case 12802: return go(gdn_decode_fused_kernel<128, 2, ST>);
      case 12804: return go(gdn_decode_fused_kernel<128, 4, ST>);
      default: chk.require(false, "no built kernel for this Dk and split"); return cudaErrorInvalidValue;
    }
  };
  return p.ssm_state_dtype == DType::bf16 ? pick(__nv_bfloat16{}) : pick(float{});
}

}  // namespace sg
