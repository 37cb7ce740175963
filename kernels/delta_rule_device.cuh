// delta_rule_device.cuh: the recurrent gated delta-rule step for one state column, shared by the
// delta_rule.decode kernel and the fused gdn.decode arm so both round identically.
//   column j of S (Dk rows, row stride `stride` elements; stored f32 or bf16, computed in f32):
//   s_i = S[i][j] * decay; kv = fmaf chain over i = 0..Dk-1 of s_i * k_i; u = (v_j - kv) * beta;
//   s_i = fmaf(k_i, u, s_i); o = fmaf chain over i of s_i * qs_i (qs = q / sqrt(Dk)); S[i][j] = s_i.
// A column is split over Q consecutive lanes of a warp (each holds Dk/Q rows in registers, so
// fewer registers and more warps in flight); the two fmaf chains are passed from lane to lane in
// row order with shuffles, so the result is the same chain, bit for bit, for every Q.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/numeric.h"

namespace sg::dev {

// One recurrent step on a state column held in registers (s[i] = S[r0 + i][j] of this lane's row
// block of R = Dk/Q rows). Called by every lane of the warp (all 32 take part in the shuffles;
// lanes past the last column pass zeros); returns o in every lane of the group. The prefill scan
// keeps s across tokens; the decode kernels load it, step once and store it.
template <int DK, int Q>
__device__ __forceinline__ float delta_rule_step(float (&s)[DK / Q], const float* ks, const float* qs, float decay,
                                                 float beta, float v) {
  static_assert(DK % Q == 0 && 32 % Q == 0, "Q must divide Dk and 32");
  constexpr int R = DK / Q;
  const int lane = threadIdx.x % 32, part = lane % Q, base = lane - part;
  const int r0 = part * R;
#pragma unroll
  for (int i = 0; i < R; ++i) s[i] = s[i] * decay;
  float kv = 0.0f;
#pragma unroll
  for (int p = 0; p < Q; ++p) {
    if (part == p) {
#pragma unroll
      for (int i = 0; i < R; ++i) kv = fmaf(s[i], ks[r0 + i], kv);
    }
    if constexpr (Q > 1) kv = __shfl_sync(0xffffffffu, kv, base + p);
  }
  const float u = (v - kv) * beta;
#pragma unroll
  for (int i = 0; i < R; ++i) s[i] = fmaf(ks[r0 + i], u, s[i]);
  float o = 0.0f;
#pragma unroll
  for (int p = 0; p < Q; ++p) {
    if (part == p) {
#pragma unroll
      for (int i = 0; i < R; ++i) o = fmaf(s[i], qs[r0 + i], o);
    }
    if constexpr (Q > 1) o = __shfl_sync(0xffffffffu, o, base + p);
  }
  return o;
}

// A state element as f32 (exact for bf16) and an f32 value as a state element (bf16: rounded to
// nearest even, __float2bfloat16_rn, as sg::round_bf16 on the CPU).
__device__ __forceinline__ float state_to_f32(float x) { return x; }
__device__ __forceinline__ float state_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T state_from_f32(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16_rn(x);
  } else {
    static_assert(std::is_same_v<T, float>, "a state element is float or __nv_bfloat16");
    return x;
  }
}

// This lane's rows of a state column to and from registers: s[i] = S[(r0 + i) * stride] for the
// R = Dk/Q rows r0 = (lane % Q) * R ..; S points at row 0 of the column; T, the state's element
// type, is float or __nv_bfloat16 (the state dtype: read widened exactly, stored rounded to nearest
// even; the arithmetic is f32 either way). load_column reads only when `read` (else zeros: padding
// rows, columns past Dv, a sequence without history); store_column writes only when `write`. The
// decode kernels and the prefill scan use both.
template <int DK, int Q, typename T>
__device__ __forceinline__ void load_column(float (&s)[DK / Q], const T* S, int64_t stride, bool read) {
  constexpr int R = DK / Q;
  const int r0 = (threadIdx.x % 32 % Q) * R;
#pragma unroll
  for (int i = 0; i < R; ++i) s[i] = read ? state_to_f32(S[static_cast<int64_t>(r0 + i) * stride]) : 0.0f;
}
template <int DK, int Q, typename T>
__device__ __forceinline__ void store_column(const float (&s)[DK / Q], T* S, int64_t stride, bool write) {
  constexpr int R = DK / Q;
  const int r0 = (threadIdx.x % 32 % Q) * R;
  if (!write) return;
#pragma unroll
  for (int i = 0; i < R; ++i) S[static_cast<int64_t>(r0 + i) * stride] = state_from_f32<T>(s[i]);
}

// Calls f(T{}) with T the state's element type for `t`: float for f32, __nv_bfloat16 for bf16;
// false (f not called) for any other dtype.
template <typename F>
bool with_state_type(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(float{}); return true;
    case DType::bf16: f(__nv_bfloat16{}); return true;
    default: return false;
  }
}

// Calls f(std::integral_constant<int, DK>, std::integral_constant<int, Q>) for the built (Dk, Q)
// pairs (delta_rule_decode_split in contracts.h says which); false when the pair is not built.
template <typename F>
bool with_delta_rule_tile(int Dk, int q, F&& f) {
  auto call = [&](auto dk, auto qq) {
    f(dk, qq);
    return true;
  };
  using std::integral_constant;
  switch (Dk * 100 + q) {
    case 801: return call(integral_constant<int, 8>{}, integral_constant<int, 1>{});
    case 804: return call(integral_constant<int, 8>{}, integral_constant<int, 4>{});
    case 1601: return call(integral_constant<int, 16>{}, integral_constant<int, 1>{});
    case 1604: return call(integral_constant<int, 16>{}, integral_constant<int, 4>{});
    case 3201: return call(integral_constant<int, 32>{}, integral_constant<int, 1>{});
    case 3204: return call(integral_constant<int, 32>{}, integral_constant<int, 4>{});
    case 6401: return call(integral_constant<int, 64>{}, integral_constant<int, 1>{});
    case 6404: return call(integral_constant<int, 64>{}, integral_constant<int, 4>{});
    case 12801: return call(integral_constant<int, 128>{}, integral_constant<int, 1>{});
    case 12802: return call(integral_constant<int, 128>{}, integral_constant<int, 2>{});
    case 12804: return call(integral_constant<int, 128>{}, integral_constant<int, 4>{});
    case 12808: return call(integral_constant<int, 128>{}, integral_constant<int, 8>{});
    default: return false;
  }
}

}  // namespace sg::dev
