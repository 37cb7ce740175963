// delta_rule.cu: recurrent gated delta rule, decode step.
#include "kernels/contracts.h"
#include "kernels/delta_rule.h"
#include "kernels/delta_rule_device.cuh"
#include "kernels/device_util.cuh"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

// Grid (Hv * col_blocks, rows); block round_up(Dv / col_blocks * Q, 32): Q consecutive threads share
// column (blockIdx.x % col_blocks) * Dv / col_blocks + t / Q.
template <int DK, int Q>
__global__ void __launch_bounds__(Q == 1   ? 256
                                  : Q == 8 ? 1024
                                           : 512) delta_rule_decode_kernel(const DeltaRuleDecodeParams p) {
  __shared__ float ks[DK], qs[DK];
  const int cb = p.col_blocks, cols = p.Dv / cb;  // resolved by the launcher
  const int hv = blockIdx.x / cb, r = blockIdx.y, jl = threadIdx.x / Q;
  const int j = (blockIdx.x % cb) * cols + jl;  // this thread's state column
  const int64_t orow = (static_cast<int64_t>(r) * p.Hv + hv) * p.Dv;
  const bool active = jl < cols;
  // Before the dependency wait: the slot (step metadata) and this column's state, which only this
  // op writes (launch.cuh says why both are safe to read here). The loads overlap the previous
  // kernel's tail.
  const int slot = p.slots[r];
  float* S = p.state + (static_cast<int64_t>(slot < 0 ? 0 : slot) * p.Hv + hv) * DK * p.Dv + (active ? j : 0);
  float s[DK / Q];
  dev::load_column<DK, Q>(s, S, p.Dv, active && slot >= 0);
  pdl_start();  // kernels/launch.cuh
  if (slot < 0) {
    if (active && threadIdx.x % Q == 0) dev::store(p.out, p.out_dtype, orow + j, 0.0f);
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
  const float decay = expf(p.g[static_cast<int64_t>(r) * p.Hv + hv]);
  const float beta = p.beta[static_cast<int64_t>(r) * p.Hv + hv];
  const float v = active ? dev::load(p.v, p.qkv_dtype, orow + j) : 0.0f;
  const float o = dev::delta_rule_step<DK, Q>(s, ks, qs, decay, beta, v);
  dev::store_column<DK, Q>(s, S, p.Dv, active);
  if (active && threadIdx.x % Q == 0) dev::store(p.out, p.out_dtype, orow + j, o);
}

template <int DK, int Q>
void launch(const DeltaRuleDecodeParams& p, cudaStream_t stream) {
  const int cb = p.col_blocks;
  const dim3 grid(p.Hv * cb, p.rows), block((p.Dv / cb * Q + 31) / 32 * 32);
  launch_kernel(delta_rule_decode_kernel<DK, Q>, grid, block, 0, stream, p);
}

}  // namespace

bool delta_rule_decode_supports(int Dk, int Dv) { return delta_rule_decode_split(Dk, Dv) != 0; }

cudaError_t delta_rule_decode(const DeltaRuleDecodeParams& p, cudaStream_t stream) {
  LaunchCheck chk("delta_rule.decode");
  chk.require(delta_rule_decode_supports(p.Dk, p.Dv), "no built split for this Dk, Dv (Dk 8..128, Dv <= 256)");
  chk.in_range(p.Hk, 1, INT32_MAX, "Hk").require(p.Hk < 1 || p.Hv % p.Hk == 0, "Hv must be a multiple of Hk");
  if (!chk.ok()) return cudaErrorInvalidValue;
  const int q = delta_rule_decode_split(p.Dk, p.Dv, p.split);
  const int cb = delta_rule_decode_col_blocks(p.Dv, q, p.col_blocks);
  chk.require(q != 0, "split: not a built split for this Dk, Dv (1, 2, 4 or 8; 0 = automatic)");
  chk.require(cb != 0, "col_blocks must be 0, 1, 2 or 4 and divide Dv");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  DeltaRuleDecodeParams r = p;
  r.col_blocks = cb;
  const bool built = dev::with_delta_rule_tile(
      p.Dk, q, [&](auto dk, auto qq) { launch<decltype(dk)::value, decltype(qq)::value>(r, stream); });
  chk.require(built, "no built tile for this Dk and split");
  if (!built) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace sg
