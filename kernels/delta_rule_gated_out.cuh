// delta_rule_gated_out.cuh: the GDN layer's gated RMSNorm as the output stage of the mma
// delta-rule prefill (delta_rule_prefill_mma.cu, DeltaRulePrefillParams::norm_w): rows of bf16
// values normed with z and w exactly as gated_rmsnorm's 16-byte kernel does (rmsnorm.cu,
// gated_vec_kernel): R = Dv / 8 consecutive lanes own a row, 8 consecutive values each; the sum of
// squares by dev::row_sumsq8, dev::gated_norm_inv and dev::gated_norm_value, the functions that
// kernel calls; one rounding to bf16 at the store.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/delta_rule_prefill.h"
#include "kernels/device_util.cuh"

namespace sg::gated_out {

// Rows t0 .. t0 + n - 1 (absolute token rows) of v-head hv, all Dv = BV columns, by the block's NT
// threads: row r's values from the bf16 tile ob (row pitch ldo elements; null: every value 0, a
// padding sequence's output), its gate from p.norm_z, the weight from p.norm_w; the normed row to
// p.out. Every thread of the block calls it with the same n (the shuffles need whole warps).
template <int BV, int NT>
__device__ __forceinline__ void norm_rows(const DeltaRulePrefillParams& p, const __nv_bfloat16* ob, int ldo, int64_t t0,
                                          int n, int hv, int tid) {
  constexpr int R = BV / 8;    // lanes a row
  constexpr int RPP = NT / R;  // rows a pass
  static_assert(R == 8 || R == 16, "Dv 64 or 128: the norm kernel's 16-byte path");
  const int part = tid % R, rr = tid / R;
  const int64_t zts = p.norm_z_stride ? p.norm_z_stride : static_cast<int64_t>(p.Hv) * p.Dv;
  float w[8];
  if (p.norm_w_dtype == DType::bf16) {
    dev::load8(static_cast<const __nv_bfloat16*>(p.norm_w) + 8 * part, w);
  } else {
    dev::load8(static_cast<const float*>(p.norm_w) + 8 * part, w);
  }
  for (int base = 0; base < n; base += RPP) {
    const int r = base + rr;
    const bool live = r < n;
    float x[8] = {}, z[8] = {};
    if (live) {
      if (ob) dev::unpack8(*reinterpret_cast<const uint4*>(ob + r * ldo + 8 * part), x);
      dev::load8(
          static_cast<const __nv_bfloat16*>(p.norm_z) + (t0 + r) * zts + static_cast<int64_t>(hv) * BV + 8 * part, z);
    }
    const float s = dev::row_sumsq8<R>(x);  // the norm kernel's order
    if (!live) continue;
    const float inv = dev::gated_norm_inv(s, BV, p.norm_eps);
    float y[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = dev::gated_norm_value(w[i], x[i], inv, z[i]);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.out) + ((t0 + r) * p.Hv + hv) * BV + 8 * part) =
        dev::pack8(y);
  }
}

// Rows *p.norm_live .. p.norm_rows - 1 of v-head hv: zeros (the rows past the live count, which
// gated_rmsnorm zeroes and no sequence's block writes).
template <int BV, int NT>
__device__ __forceinline__ void zero_tail(const DeltaRulePrefillParams& p, int hv, int tid) {
  constexpr int R = BV / 8;
  const int64_t first = max(*p.norm_live, 0);
  for (int64_t f = first * R + tid; f < static_cast<int64_t>(p.norm_rows) * R; f += NT) {
    const int64_t t = f / R;
    const int part = static_cast<int>(f % R);
    *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.out) + (t * p.Hv + hv) * BV + 8 * part) = uint4{};
  }
}

}  // namespace sg::gated_out
