// delta_rule_ref.cpp: CPU reference of the gated delta rule: the f32 recurrent step (decode and
// recurrent prefill) and the double-precision chunked (WY) prefill; see delta_rule_ref.h.
#include "kernels/ref/delta_rule_ref.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

// The byte contract fixes every rounding of the recurrent step: the compiler must not fuse a*b+c
// on its own (every fused multiply-add here is an explicit std::fma).
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace sg::ref {
namespace {

void check_shape(const DeltaShape& s, const char* op) {
  detail::require(s.Hk >= 1 && s.Hv >= 1 && s.Dk >= 1 && s.Dv >= 1, op,
                  "Hk, Hv, Dk, Dv must all be >= 1, got " + std::to_string(s.Hk) + ", " + std::to_string(s.Hv) + ", " +
                      std::to_string(s.Dk) + ", " + std::to_string(s.Dv));
  detail::require(s.Hv % s.Hk == 0, op,
                  "Hv (" + std::to_string(s.Hv) + ") must be a multiple of Hk (" + std::to_string(s.Hk) + ")");
}

// Checks shared by both prefill forms.
void check_prefill(const DeltaShape& s, int N, const int32_t* cu_seqlens, const float* q, const float* k,
                   const float* v, const float* g, const float* beta, const int32_t* slots, const uint8_t* has_history,
                   const float* state, const float* out, const char* op) {
  check_shape(s, op);
  detail::require(N >= 0, op, "N must be >= 0, got " + std::to_string(N));
  detail::require_ptr(cu_seqlens, op, "cu_seqlens");
  detail::require_cu_seqlens(cu_seqlens, N, op);
  if (N == 0) return;
  detail::require_ptr(slots, op, "slots");
  detail::require_ptr(has_history, op, "has_history");
  detail::require_ptr(state, op, "state");
  if (cu_seqlens[N] > 0) {
    const void* ptrs[] = {q, k, v, g, beta, out};
    const char* names[] = {"q", "k", "v", "g", "beta", "out"};
    for (int i = 0; i < 6; ++i) detail::require_ptr(ptrs[i], op, names[i]);
  }
  detail::require_distinct_slots(slots, N, op);
}

// One recurrent step of one v-head, f32, in the contract's order. S [Dk, Dv]; q, k [Dk]; v [Dv];
// out [Dv]; u [Dv] scratch.
void recurrent_step(const DeltaShape& s, float* S, const float* q, const float* k, const float* v, float g, float beta,
                    float* out, float* u) {
  const int Dk = s.Dk, Dv = s.Dv;
  const float decay = std::exp(g);
  const float scale = 1.0f / std::sqrt(static_cast<float>(Dk));
  for (int i = 0; i < Dk; ++i)
    for (int j = 0; j < Dv; ++j) S[i * Dv + j] = S[i * Dv + j] * decay;
  for (int j = 0; j < Dv; ++j) {
    float kv = 0.0f;
    for (int i = 0; i < Dk; ++i) kv = std::fma(S[i * Dv + j], k[i], kv);
    u[j] = (v[j] - kv) * beta;
  }
  for (int i = 0; i < Dk; ++i)
    for (int j = 0; j < Dv; ++j) S[i * Dv + j] = std::fma(k[i], u[j], S[i * Dv + j]);
  for (int j = 0; j < Dv; ++j) {
    float o = 0.0f;
    for (int i = 0; i < Dk; ++i) o = std::fma(S[i * Dv + j], q[i] * scale, o);
    out[j] = store(o, s.out);
  }
}

// Views of token t's inputs for v-head hv.
struct TokenInputs {
  const float *q, *k, *v;
  float g, beta;
};
TokenInputs token_inputs(const DeltaShape& s, int64_t t, int hv, const float* q, const float* k, const float* v,
                         const float* g, const float* beta) {
  const int hk = hv / (s.Hv / s.Hk);
  const int64_t qk = (t * s.Hk + hk) * s.Dk;
  return {q + qk, k + qk, v + (t * s.Hv + hv) * s.Dv, g[t * s.Hv + hv], beta[t * s.Hv + hv]};
}

// The state as stored between calls: with Store::bf16 every element rounded to nearest-even bf16.
void round_state(const DeltaShape& s, float* S, int64_t n) {
  if (s.state == Store::f32) return;
  for (int64_t e = 0; e < n; ++e) S[e] = store(S[e], s.state);
}

void zero_rows(float* out, int64_t begin, int64_t end, int64_t row_size) {
  std::fill(out + begin * row_size, out + end * row_size, 0.0f);
}

// Chunked form for one (sequence, v-head): S [Dk, Dv] double, the state on entry and on exit.
void chunked_head(const DeltaShape& s, int chunk, int64_t start, int len, int hv, const float* q, const float* k,
                  const float* v, const float* g, const float* beta, std::vector<double>& S, float* out) {
  const int Dk = s.Dk, Dv = s.Dv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(Dk));
  for (int c0 = 0; c0 < len; c0 += chunk) {
    const int L = std::min(chunk, len - c0);
    std::vector<TokenInputs> in(L);
    std::vector<double> G(L);  // cumulative gate within the chunk
    for (int r = 0; r < L; ++r) {
      in[r] = token_inputs(s, start + c0 + r, hv, q, k, v, g, beta);
      G[r] = (r > 0 ? G[r - 1] : 0.0) + static_cast<double>(in[r].g);
    }
    auto dot_k = [&](const float* a, const float* b) {
      double d = 0.0;
      for (int i = 0; i < Dk; ++i) d += static_cast<double>(a[i]) * static_cast<double>(b[i]);
      return d;
    };
    // A [L, L] strictly lower; Tm = (I + A)^-1, unit lower triangular, by forward substitution.
    std::vector<double> A(static_cast<size_t>(L) * L, 0.0), Tm(static_cast<size_t>(L) * L, 0.0);
    for (int r = 0; r < L; ++r)
      for (int c = 0; c < r; ++c) A[r * L + c] = in[r].beta * std::exp(G[r] - G[c]) * dot_k(in[r].k, in[c].k);
    for (int r = 0; r < L; ++r) {
      Tm[r * L + r] = 1.0;
      for (int c = 0; c < r; ++c) {
        double acc = 0.0;
        for (int m = c; m < r; ++m) acc += A[r * L + m] * Tm[m * L + c];
        Tm[r * L + c] = -acc;
      }
    }
    // W [L, Dk] = Tm (beta exp(G) K); U [L, Dv] = Tm (beta V); Un = U - W S0 (the true u).
    std::vector<double> W(static_cast<size_t>(L) * Dk, 0.0), Un(static_cast<size_t>(L) * Dv, 0.0);
    for (int r = 0; r < L; ++r)
      for (int c = 0; c <= r; ++c) {
        const double t = Tm[r * L + c] * in[c].beta;
        const double te = t * std::exp(G[c]);
        for (int i = 0; i < Dk; ++i) W[r * Dk + i] += te * in[c].k[i];
        for (int j = 0; j < Dv; ++j) Un[r * Dv + j] += t * in[c].v[j];
      }
    for (int r = 0; r < L; ++r)
      for (int i = 0; i < Dk; ++i)
        for (int j = 0; j < Dv; ++j) Un[r * Dv + j] -= W[r * Dk + i] * S[i * Dv + j];
    // Outputs: o_r = exp(G_r) S0^T q'_r + sum_{c<=r} exp(G_r - G_c) (q'_r . k_c) Un_c.
    std::vector<double> o(Dv);
    for (int r = 0; r < L; ++r) {
      std::vector<double> qs(Dk);
      for (int i = 0; i < Dk; ++i) qs[i] = static_cast<double>(in[r].q[i]) * scale;
      std::fill(o.begin(), o.end(), 0.0);
      for (int i = 0; i < Dk; ++i)
        for (int j = 0; j < Dv; ++j) o[j] += qs[i] * S[i * Dv + j];
      for (int j = 0; j < Dv; ++j) o[j] *= std::exp(G[r]);
      for (int c = 0; c <= r; ++c) {
        double qk = 0.0;
        for (int i = 0; i < Dk; ++i) qk += qs[i] * in[c].k[i];
        const double w = std::exp(G[r] - G[c]) * qk;
        for (int j = 0; j < Dv; ++j) o[j] += w * Un[c * Dv + j];
      }
      float* out_row = out + ((start + c0 + r) * s.Hv + hv) * Dv;
      for (int j = 0; j < Dv; ++j) out_row[j] = store(static_cast<float>(o[j]), s.out);
    }
    // State: S = exp(G_last) S0 + sum_c exp(G_last - G_c) k_c Un_c^T.
    const double last = G[L - 1];
    for (double& x : S) x *= std::exp(last);
    for (int c = 0; c < L; ++c) {
      const double e = std::exp(last - G[c]);
      for (int i = 0; i < Dk; ++i)
        for (int j = 0; j < Dv; ++j) S[i * Dv + j] += e * in[c].k[i] * Un[c * Dv + j];
    }
  }
}

}  // namespace

void delta_rule_decode(const DeltaShape& s, int B, const float* q, const float* k, const float* v, const float* g,
                       const float* beta, const int32_t* slots, float* state, float* out) {
  const char* op = "delta_rule_decode";
  check_shape(s, op);
  detail::require(B >= 0, op, "B must be >= 0, got " + std::to_string(B));
  if (B == 0) return;
  const void* ptrs[] = {q, k, v, g, beta, slots, state, out};
  const char* names[] = {"q", "k", "v", "g", "beta", "slots", "state", "out"};
  for (int i = 0; i < 8; ++i) detail::require_ptr(ptrs[i], op, names[i]);
  detail::require_distinct_slots(slots, B, op);

  const int64_t head_size = static_cast<int64_t>(s.Dk) * s.Dv;
  std::vector<float> u(s.Dv);
  for (int b = 0; b < B; ++b) {
    if (slots[b] < 0) {
      zero_rows(out, b, b + 1, static_cast<int64_t>(s.Hv) * s.Dv);
      continue;
    }
    for (int hv = 0; hv < s.Hv; ++hv) {
      const TokenInputs in = token_inputs(s, b, hv, q, k, v, g, beta);
      float* S = state + (static_cast<int64_t>(slots[b]) * s.Hv + hv) * head_size;
      recurrent_step(s, S, in.q, in.k, in.v, in.g, in.beta, out + (static_cast<int64_t>(b) * s.Hv + hv) * s.Dv,
                     u.data());
      round_state(s, S, head_size);  // the step's state, as stored (f32: unchanged)
    }
  }
}

void delta_rule_prefill_recurrent(const DeltaShape& s, int N, const int32_t* cu_seqlens, const float* q, const float* k,
                                  const float* v, const float* g, const float* beta, const int32_t* slots,
                                  const uint8_t* has_history, float* state, float* out) {
  const char* op = "delta_rule_prefill_recurrent";
  check_prefill(s, N, cu_seqlens, q, k, v, g, beta, slots, has_history, state, out, op);
  const int64_t head_size = static_cast<int64_t>(s.Dk) * s.Dv;
  std::vector<float> S(head_size), u(s.Dv);
  for (int n = 0; n < N; ++n) {
    const int64_t start = cu_seqlens[n], end = cu_seqlens[n + 1];
    if (slots[n] < 0) {
      zero_rows(out, start, end, static_cast<int64_t>(s.Hv) * s.Dv);
      continue;
    }
    if (start == end) continue;  // documented: no read, no write
    for (int hv = 0; hv < s.Hv; ++hv) {
      float* slot_state = state + (static_cast<int64_t>(slots[n]) * s.Hv + hv) * head_size;
      for (int64_t e = 0; e < head_size; ++e) S[e] = has_history[n] ? slot_state[e] : 0.0f;
      for (int64_t t = start; t < end; ++t) {
        const TokenInputs in = token_inputs(s, t, hv, q, k, v, g, beta);
        recurrent_step(s, S.data(), in.q, in.k, in.v, in.g, in.beta, out + (t * s.Hv + hv) * s.Dv, u.data());
      }
      round_state(s, S.data(), head_size);  // the final state, rounded once (f32: unchanged)
      std::copy(S.begin(), S.end(), slot_state);
    }
  }
}

void delta_rule_prefill_chunked(const DeltaShape& s, int N, const int32_t* cu_seqlens, const float* q, const float* k,
                                const float* v, const float* g, const float* beta, const int32_t* slots,
                                const uint8_t* has_history, float* state, float* out, int chunk) {
  const char* op = "delta_rule_prefill_chunked";
  check_prefill(s, N, cu_seqlens, q, k, v, g, beta, slots, has_history, state, out, op);
  detail::require(chunk >= 1, op, "chunk must be >= 1, got " + std::to_string(chunk));
  const int64_t head_size = static_cast<int64_t>(s.Dk) * s.Dv;
  std::vector<double> S(head_size);
  for (int n = 0; n < N; ++n) {
    const int64_t start = cu_seqlens[n], end = cu_seqlens[n + 1];
    if (slots[n] < 0) {
      zero_rows(out, start, end, static_cast<int64_t>(s.Hv) * s.Dv);
      continue;
    }
    if (start == end) continue;  // documented: no read, no write
    for (int hv = 0; hv < s.Hv; ++hv) {
      float* slot_state = state + (static_cast<int64_t>(slots[n]) * s.Hv + hv) * head_size;
      for (int64_t e = 0; e < head_size; ++e) S[e] = has_history[n] ? slot_state[e] : 0.0;
      chunked_head(s, chunk, start, static_cast<int>(end - start), hv, q, k, v, g, beta, S, out);
      for (int64_t e = 0; e < head_size; ++e) slot_state[e] = store(static_cast<float>(S[e]), s.state);
    }
  }
}

}  // namespace sg::ref
