// conv_ref.cpp: CPU reference of the GDN causal conv (decode update and varlen prefill); see
// conv_ref.h for the contract. Written for reading, not speed: one (token, channel) at a time.
#include "kernels/ref/conv_ref.h"

#include <cmath>
#include <string>
#include <vector>

// The byte contract fixes every rounding: the compiler must not fuse a*b+c on its own (the GPU
// side builds with -fmad=false; every fused multiply-add here is an explicit std::fma).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace sg::ref {
namespace {

void check_shape(const ConvShape& s, int64_t x_stride, const char* op) {
  detail::require(s.C >= 1, op, "C must be >= 1, got " + std::to_string(s.C));
  detail::require(s.K >= 1, op, "K must be >= 1, got " + std::to_string(s.K));
  detail::require(x_stride >= s.C, op,
                  "x_stride (" + std::to_string(x_stride) + ") must be >= C (" + std::to_string(s.C) + ")");
}

// One output value. taps [K], oldest first; w_c [K]; the contract's exact order.
float conv_point(const ConvShape& s, const float* taps, const float* w_c, const float* bias, int c) {
  float acc = bias ? bias[c] : 0.0f;
  for (int j = 0; j < s.K; ++j) acc = std::fma(w_c[j], taps[j], acc);
  if (s.silu) acc = acc / (1.0f + std::exp(-acc));
  return store(acc, s.out);
}

}  // namespace

void conv_update(const ConvShape& s, int B, const float* x, int64_t x_stride, const int32_t* slots, float* state,
                 const float* w, const float* bias, float* out) {
  const char* op = "conv_update";
  check_shape(s, x_stride, op);
  detail::require(B >= 0, op, "B must be >= 0, got " + std::to_string(B));
  if (B == 0) return;
  detail::require_ptr(x, op, "x");
  detail::require_ptr(slots, op, "slots");
  detail::require_ptr(w, op, "w");
  detail::require_ptr(out, op, "out");
  if (s.K > 1) detail::require_ptr(state, op, "state");
  detail::require_distinct_slots(slots, B, op);

  const int C = s.C, K = s.K, H = K - 1;  // H: state entries per channel
  std::vector<float> taps(K);
  for (int b = 0; b < B; ++b) {
    float* out_row = out + static_cast<int64_t>(b) * C;
    const int32_t slot = slots[b];
    if (slot < 0) {
      for (int c = 0; c < C; ++c) out_row[c] = 0.0f;
      continue;
    }
    const float* x_row = x + static_cast<int64_t>(b) * x_stride;
    for (int c = 0; c < C; ++c) {
      float* st = H > 0 ? state + (static_cast<int64_t>(slot) * C + c) * H : nullptr;  // [K-1]
      for (int j = 0; j < H; ++j) taps[j] = st[j];
      taps[H] = x_row[c];
      out_row[c] = conv_point(s, taps.data(), w + static_cast<int64_t>(c) * K, bias, c);
      // Roll left by one and append the raw input.
      for (int j = 0; j + 1 < H; ++j) st[j] = st[j + 1];
      if (H > 0) st[H - 1] = store(x_row[c], s.state);
    }
  }
}

void conv_fwd(const ConvShape& s, int N, const int32_t* cu_seqlens, const float* x, int64_t x_stride,
              const int32_t* slots, const uint8_t* has_history, float* state, const float* w, const float* bias,
              float* out) {
  const char* op = "conv_fwd";
  check_shape(s, x_stride, op);
  detail::require(N >= 0, op, "N must be >= 0, got " + std::to_string(N));
  detail::require_ptr(cu_seqlens, op, "cu_seqlens");
  detail::require_cu_seqlens(cu_seqlens, N, op);
  if (N == 0) return;
  detail::require_ptr(slots, op, "slots");
  detail::require_ptr(has_history, op, "has_history");
  detail::require_ptr(w, op, "w");
  if (cu_seqlens[N] > 0) {
    detail::require_ptr(x, op, "x");
    detail::require_ptr(out, op, "out");
  }
  if (s.K > 1) detail::require_ptr(state, op, "state");
  detail::require_distinct_slots(slots, N, op);

  const int C = s.C, K = s.K, H = K - 1;
  std::vector<float> taps(K), old_state(H > 0 ? H : 1);
  for (int n = 0; n < N; ++n) {
    const int64_t start = cu_seqlens[n];
    const int len = cu_seqlens[n + 1] - cu_seqlens[n];
    const int32_t slot = slots[n];
    if (slot < 0) {
      for (int64_t t = 0; t < len; ++t)
        for (int c = 0; c < C; ++c) out[(start + t) * C + c] = 0.0f;
      continue;
    }
    if (len == 0) continue;  // documented: no read, no write
    const bool hist = has_history[n] != 0;
    for (int c = 0; c < C; ++c) {
      float* st = H > 0 ? state + (static_cast<int64_t>(slot) * C + c) * H : nullptr;  // [K-1]
      // Read the whole old state row before writing any of it.
      for (int j = 0; j < H; ++j) old_state[j] = hist ? st[j] : 0.0f;
      // Token index i of this sequence (may be negative: then it is old_state[H + i]).
      auto input = [&](int i) { return i >= 0 ? x[(start + i) * x_stride + c] : old_state[H + i]; };
      for (int t = 0; t < len; ++t) {
        for (int j = 0; j < K; ++j) taps[j] = input(t - (K - 1 - j));
        out[(start + t) * C + c] = conv_point(s, taps.data(), w + static_cast<int64_t>(c) * K, bias, c);
      }
      // New state: the last K-1 entries of [old_state, stored inputs].
      for (int j = 0; j < H; ++j) {
        const int i = len - H + j;  // token index feeding state entry j
        st[j] = i >= 0 ? store(x[(start + i) * x_stride + c], s.state) : old_state[H + i];
      }
    }
  }
}

}  // namespace sg::ref
