// CPU tests of the gated delta rule reference (kernels/ref/delta_rule_ref.h): a hand-computed
// Dk = Dv = 2 decode, delta-rule invariants (full decay, exact write at beta = 1), the q/k head
// mapping, padding slots, the bitwise equivalences prefill + decode = longer prefill, and the
// chunked (WY) form against the recurrent form within the tolerance documented in the header.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/ref/delta_rule_ref.h"
#include "tests/support/catch.h"
#include "tests/support/random.h"
#include "tests/support/tolerance.h"

using namespace sg;
using namespace sg::ref;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Tolerances documented in delta_rule_ref.h (chunked vs recurrent, normalised error).
const double kTolF32 = 1e-5;
const double kTolBf16 = 8e-3;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ||a - b|| / ||b|| (tests/support/tolerance.h).
double norm_err(const float* a, const float* b, size_t n) { return test::l2_normalised_error(a, b, n); }

// Random inputs for T tokens: q, k L2-normalised per head (as postconv makes them), v in [-1, 1],
// g in [g_lo, g_hi], beta in (0, 1).
struct Inputs {
  std::vector<float> q, k, v, g, beta;
};
Inputs make_inputs(const DeltaShape& s, int T, uint64_t seed, float g_lo, float g_hi) {
  Inputs in;
  in.q = test::uniform(size_t(T) * s.Hk * s.Dk, seed);
  in.k = test::uniform(size_t(T) * s.Hk * s.Dk, seed + 1);
  in.v = test::uniform(size_t(T) * s.Hv * s.Dv, seed + 2);
  in.g = test::uniform(size_t(T) * s.Hv, seed + 3, g_lo, g_hi);
  in.beta = test::uniform(size_t(T) * s.Hv, seed + 4, 0.f, 1.f);
  for (auto* x : {&in.q, &in.k}) {
    for (size_t h = 0; h < x->size() / s.Dk; ++h) {
      float* p = x->data() + h * s.Dk;
      double n2 = 0;
      for (int i = 0; i < s.Dk; ++i) n2 += double(p[i]) * p[i];
      for (int i = 0; i < s.Dk; ++i) p[i] = float(p[i] / std::sqrt(n2));
    }
  }
  return in;
}

int64_t head_size(const DeltaShape& s) { return int64_t(s.Dk) * s.Dv; }

}  // namespace

// Hk = Hv = 1, Dk = Dv = 2, S[i][j] row-major: S0 = [[1, 2], [3, 4]], k = (1, 0), v = (5, 6),
// q = (1, 1), beta = 0.5.
TEST_CASE("delta_rule_decode: hand-computed Dk=Dv=2", "[ref][delta_rule]") {
  const DeltaShape s{1, 1, 2, 2, Store::f32};
  std::vector<float> state = {1, 2, 3, 4};
  const std::vector<float> q = {1, 1}, k = {1, 0}, v = {5, 6}, beta = {0.5f};
  const std::vector<int32_t> slots = {0};
  std::vector<float> out(2, kNaN);
  const float r2 = 1.0f / std::sqrt(2.0f);  // q scale Dk^-0.5
  SECTION("g = 0: no decay") {
    const std::vector<float> g = {0.0f};
    delta_rule_decode(s, 1, q.data(), k.data(), v.data(), g.data(), beta.data(), slots.data(), state.data(),
                      out.data());
    // S^T k = (1, 2); u = ((5 - 1) * 0.5, (6 - 2) * 0.5) = (2, 2); S = S + k u^T = [[3, 4], [3, 4]].
    CHECK(state == std::vector<float>{3, 4, 3, 4});
    // o = S^T (q * r2) = (6 r2, 8 r2), accumulated over i with fma.
    CHECK(out[0] == std::fma(3.0f, r2, 3.0f * r2));
    CHECK(out[1] == std::fma(4.0f, r2, 4.0f * r2));
    CHECK(out[0] == Approx(4.2426406871).epsilon(1e-6));
    CHECK(out[1] == Approx(5.6568542495).epsilon(1e-6));
  }
  SECTION("g = -ln 2: the state halves first") {
    const std::vector<float> g = {-0.6931472f};
    delta_rule_decode(s, 1, q.data(), k.data(), v.data(), g.data(), beta.data(), slots.data(), state.data(),
                      out.data());
    // S = [[0.5, 1], [1.5, 2]]; S^T k = (0.5, 1); u = (2.25, 2.5); S = [[2.75, 3.5], [1.5, 2]].
    CHECK(state[0] == Approx(2.75).epsilon(1e-6));
    CHECK(state[1] == Approx(3.5).epsilon(1e-6));
    CHECK(state[2] == Approx(1.5).epsilon(1e-6));
    CHECK(state[3] == Approx(2.0).epsilon(1e-6));
    CHECK(out[0] == Approx(4.25 / std::sqrt(2.0)).epsilon(1e-6));
    CHECK(out[1] == Approx(5.5 / std::sqrt(2.0)).epsilon(1e-6));
  }
  SECTION("bf16 output store rounds the output, not the state") {
    const DeltaShape s16{1, 1, 2, 2, Store::bf16};
    const std::vector<float> g = {0.0f};
    delta_rule_decode(s16, 1, q.data(), k.data(), v.data(), g.data(), beta.data(), slots.data(), state.data(),
                      out.data());
    CHECK(out[0] == round_bf16(std::fma(3.0f, r2, 3.0f * r2)));
    CHECK(out[0] != std::fma(3.0f, r2, 3.0f * r2));
    CHECK(state == std::vector<float>{3, 4, 3, 4});
  }
}

// The contract's decode order, transcribed literally (one head, f32), on random data where any
// reassociation, e.g. (v - kv) * beta as v*beta - kv*beta or the scale applied to S, changes bits.
TEST_CASE("delta_rule_decode: exact f32 operation order on random data", "[ref][delta_rule]") {
  const DeltaShape s{1, 1, 8, 4, Store::f32};
  const int Dk = 8, Dv = 4, steps = 3;
  const auto in = make_inputs(s, steps, 131, -1.f, 0.f);
  std::vector<float> state = test::uniform(Dk * Dv, 132), S = state;  // S: the literal transcription's copy
  const std::vector<int32_t> slot0 = {0};
  int mismatches = 0;
  for (int t = 0; t < steps; ++t) {
    const float *q = &in.q[t * Dk], *k = &in.k[t * Dk], *v = &in.v[t * Dv];
    std::vector<float> out(Dv);
    delta_rule_decode(s, 1, q, k, v, &in.g[t], &in.beta[t], slot0.data(), state.data(), out.data());
    const float decay = std::exp(in.g[t]);
    const float scale = 1.0f / std::sqrt(float(Dk));
    float u[4];
    for (int i = 0; i < Dk; ++i)
      for (int j = 0; j < Dv; ++j) S[i * Dv + j] = S[i * Dv + j] * decay;
    for (int j = 0; j < Dv; ++j) {
      float kv = 0.0f;
      for (int i = 0; i < Dk; ++i) kv = std::fma(S[i * Dv + j], k[i], kv);
      u[j] = (v[j] - kv) * in.beta[t];
    }
    for (int i = 0; i < Dk; ++i)
      for (int j = 0; j < Dv; ++j) S[i * Dv + j] = std::fma(k[i], u[j], S[i * Dv + j]);
    for (int j = 0; j < Dv; ++j) {
      float o = 0.0f;
      for (int i = 0; i < Dk; ++i) o = std::fma(S[i * Dv + j], q[i] * scale, o);
      mismatches += out[j] != o;
    }
  }
  CHECK(mismatches == 0);
  CHECK(same_bits(state, S));
}

TEST_CASE("delta_rule_decode: invariants of the delta rule", "[ref][delta_rule]") {
  const DeltaShape s{1, 1, 16, 8, Store::f32};
  const auto in = make_inputs(s, 1, 71, -1.f, 0.f);  // g and beta are set per section
  const std::vector<int32_t> slot0 = {0};
  std::vector<float> state = test::uniform(head_size(s), 72);
  std::vector<float> out(s.Dv, kNaN);
  SECTION("full decay (exp(g) = 0): S = beta k v^T, o = beta v (k . q')") {
    const std::vector<float> g = {-200.0f};
    delta_rule_decode(s, 1, in.q.data(), in.k.data(), in.v.data(), g.data(), in.beta.data(), slot0.data(), state.data(),
                      out.data());
    double kq = 0;
    for (int i = 0; i < s.Dk; ++i) kq += double(in.k[i]) * in.q[i] / std::sqrt(double(s.Dk));
    for (int j = 0; j < s.Dv; ++j) {
      CHECK(out[j] == Approx(in.beta[0] * in.v[j] * kq).margin(1e-6));
      for (int i = 0; i < s.Dk; ++i)
        CHECK(state[i * s.Dv + j] == Approx(double(in.beta[0]) * in.k[i] * in.v[j]).margin(1e-6));
    }
  }
  SECTION("g = 0, beta = 1, unit k: the new state maps k exactly to v") {
    const std::vector<float> g = {0.0f}, beta = {1.0f};
    delta_rule_decode(s, 1, in.q.data(), in.k.data(), in.v.data(), g.data(), beta.data(), slot0.data(), state.data(),
                      out.data());
    for (int j = 0; j < s.Dv; ++j) {
      double sk = 0;
      for (int i = 0; i < s.Dk; ++i) sk += double(state[i * s.Dv + j]) * in.k[i];
      CHECK(sk == Approx(in.v[j]).margin(1e-5));
    }
  }
}

TEST_CASE("delta_rule_decode: v-head hv reads q/k head hv / (Hv/Hk)", "[ref][delta_rule]") {
  const DeltaShape s{2, 6, 8, 4, Store::f32};  // three v-heads per q/k head
  const int B = 3;
  const auto in = make_inputs(s, B, 81, -1.f, 0.f);
  const auto state0 = test::uniform(size_t(B) * s.Hv * head_size(s), 82);
  const std::vector<int32_t> slots = {2, 0, 1};
  std::vector<float> state = state0, out(B * s.Hv * s.Dv, kNaN);
  delta_rule_decode(s, B, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), slots.data(),
                    state.data(), out.data());
  const DeltaShape one{1, 1, s.Dk, s.Dv, Store::f32};
  const std::vector<int32_t> slot0 = {0};
  for (int b = 0; b < B; ++b) {
    for (int hv = 0; hv < s.Hv; ++hv) {
      CAPTURE(b, hv);
      const int hk = hv / 3;
      std::vector<float> st(state0.begin() + (slots[b] * s.Hv + hv) * head_size(s),
                            state0.begin() + (slots[b] * s.Hv + hv + 1) * head_size(s));
      std::vector<float> o(s.Dv);
      const int qk = (b * s.Hk + hk) * s.Dk, vi = (b * s.Hv + hv) * s.Dv, gi = b * s.Hv + hv;
      delta_rule_decode(one, 1, in.q.data() + qk, in.k.data() + qk, in.v.data() + vi, in.g.data() + gi,
                        in.beta.data() + gi, slot0.data(), st.data(), o.data());
      CHECK(std::memcmp(o.data(), out.data() + vi, s.Dv * sizeof(float)) == 0);
      CHECK(std::memcmp(st.data(), state.data() + (slots[b] * s.Hv + hv) * head_size(s),
                        head_size(s) * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("delta rule: padding slots leave the state bitwise untouched and write zeros", "[ref][delta_rule]") {
  const DeltaShape s{1, 2, 8, 8, Store::bf16};
  const auto in = make_inputs(s, 9, 91, -1.f, 0.f);
  const auto state0 = test::uniform(2 * s.Hv * head_size(s), 92);
  std::vector<float> state = state0, out(9 * s.Hv * s.Dv, kNaN);
  const std::vector<int32_t> cu = {0, 4, 4, 9}, slots = {-1, -1, -1};
  const std::vector<uint8_t> hist = {1, 0, 1};
  SECTION("decode") {
    delta_rule_decode(s, 3, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), slots.data(),
                      state.data(), out.data());
    for (int i = 0; i < 3 * s.Hv * s.Dv; ++i) CHECK(out[i] == 0.0f);
  }
  SECTION("recurrent prefill") {
    delta_rule_prefill_recurrent(s, 3, cu.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                 slots.data(), hist.data(), state.data(), out.data());
    for (float o : out) CHECK(o == 0.0f);
  }
  SECTION("chunked prefill") {
    delta_rule_prefill_chunked(s, 3, cu.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                               slots.data(), hist.data(), state.data(), out.data(), 4);
    for (float o : out) CHECK(o == 0.0f);
  }
  CHECK(same_bits(state, state0));
  SECTION("zero-length sequences leave their slot alone; padding next to real work") {
    const std::vector<int32_t> cu2 = {0, 0, 0, 9}, slots2 = {0, 1, -1};
    const std::vector<uint8_t> hist2 = {0, 1, 1};
    const bool chunked = GENERATE(false, true);
    CAPTURE(chunked);
    std::vector<float> st = state0;
    if (chunked)
      delta_rule_prefill_chunked(s, 3, cu2.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                 slots2.data(), hist2.data(), st.data(), out.data(), 4);
    else
      delta_rule_prefill_recurrent(s, 3, cu2.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                   slots2.data(), hist2.data(), st.data(), out.data());
    CHECK(same_bits(st, state0));
    for (float o : out) CHECK(o == 0.0f);
  }
}

TEST_CASE("delta rule: recurrent prefill of n then decode of m equals prefill of n+m (bitwise)", "[ref][delta_rule]") {
  const int n = GENERATE(1, 5, 70);
  const int hist = GENERATE(0, 1);
  const Store st = GENERATE(Store::f32, Store::bf16);
  CAPTURE(n, hist, st == Store::bf16);
  const DeltaShape s{2, 4, 16, 8, st};
  const int m = 4, T = n + m;
  const auto in = make_inputs(s, T, 101 + n, -2.f, 0.f);
  const auto state0 = test::uniform(s.Hv * head_size(s), 102);
  const std::vector<int32_t> slot0 = {0};
  const std::vector<uint8_t> h = {uint8_t(hist)};
  const int64_t row = int64_t(s.Hv) * s.Dv;

  std::vector<float> st_one = state0, out_one(T * row, kNaN);
  const std::vector<int32_t> cu_one = {0, T}, cu_n = {0, n};
  delta_rule_prefill_recurrent(s, 1, cu_one.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                               slot0.data(), h.data(), st_one.data(), out_one.data());

  std::vector<float> st_two = state0, out_two(T * row, kNaN);
  delta_rule_prefill_recurrent(s, 1, cu_n.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                               slot0.data(), h.data(), st_two.data(), out_two.data());
  const int64_t qk = int64_t(s.Hk) * s.Dk;
  for (int t = n; t < T; ++t)
    delta_rule_decode(s, 1, in.q.data() + t * qk, in.k.data() + t * qk, in.v.data() + t * row, in.g.data() + t * s.Hv,
                      in.beta.data() + t * s.Hv, slot0.data(), st_two.data(), out_two.data() + t * row);
  CHECK(same_bits(out_two, out_one));
  CHECK(same_bits(st_two, st_one));
  if (st == Store::bf16)
    for (float o : out_one) CHECK(o == round_bf16(o));
}

TEST_CASE("delta rule: chunked prefill equals recurrent prefill within the documented tolerance", "[ref][delta_rule]") {
  struct Heads {
    int Hk, Hv, Dk, Dv;
  };
  const Heads hd = GENERATE(Heads{1, 2, 32, 32}, Heads{2, 4, 32, 16}, Heads{1, 2, 128, 128});
  // g ranges: ordinary, fast decay, near zero (almost no decay over 200 tokens).
  const int regime = GENERATE(0, 1, 2);
  const float g_lo[] = {-1.0f, -20.0f, -1e-4f}, g_hi[] = {0.0f, -5.0f, 0.0f};
  const int chunk = GENERATE(64, 16);
  CAPTURE(hd.Hk, hd.Hv, hd.Dk, hd.Dv, regime, chunk);
  // Every length with and without history in one varlen call, plus a padding and an empty sequence.
  std::vector<int> lens = {1, 63, 64, 65, 130, 200};
  if (hd.Dk == 128) lens = {1, 65, 130};  // keep the test quick at full head size
  std::vector<int32_t> cu = {0}, slots;
  std::vector<uint8_t> hist;
  for (int h = 0; h < 2; ++h)
    for (int len : lens) {
      cu.push_back(cu.back() + len);
      slots.push_back(int32_t(slots.size()));
      hist.push_back(uint8_t(h));
    }
  cu.push_back(cu.back() + 3), slots.push_back(-1), hist.push_back(1);
  cu.push_back(cu.back()), slots.push_back(int32_t(slots.size())), hist.push_back(0);
  const int N = int(slots.size()), T = cu.back();
  const int num_slots = N;

  for (Store st : {Store::f32, Store::bf16}) {
    CAPTURE(st == Store::bf16);
    const DeltaShape s{hd.Hk, hd.Hv, hd.Dk, hd.Dv, st};
    const auto in = make_inputs(s, T, 111 + regime, g_lo[regime], g_hi[regime]);
    const auto state0 = test::uniform(size_t(num_slots) * s.Hv * head_size(s), 112, -0.5f, 0.5f);
    const int64_t row = int64_t(s.Hv) * s.Dv, slot_size = s.Hv * head_size(s);
    std::vector<float> st_r = state0, st_c = state0, out_r(T * row, kNaN), out_c(T * row, kNaN);
    delta_rule_prefill_recurrent(s, N, cu.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                 slots.data(), hist.data(), st_r.data(), out_r.data());
    delta_rule_prefill_chunked(s, N, cu.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                               slots.data(), hist.data(), st_c.data(), out_c.data(), chunk);
    double worst_out = 0, worst_state = 0;
    for (int n = 0; n < N; ++n) {
      CAPTURE(n, cu[n + 1] - cu[n], int(hist[n]));
      const double e_out = norm_err(out_c.data() + cu[n] * row, out_r.data() + cu[n] * row, (cu[n + 1] - cu[n]) * row);
      CHECK(e_out <= (st == Store::f32 ? kTolF32 : kTolBf16));
      worst_out = std::max(worst_out, e_out);
      if (slots[n] >= 0) {
        const double e_st = norm_err(st_c.data() + slots[n] * slot_size, st_r.data() + slots[n] * slot_size, slot_size);
        CHECK(e_st <= kTolF32);
        worst_state = std::max(worst_state, e_st);
      }
    }
    INFO("worst normalised error: outputs " << worst_out << ", state " << worst_state);
    if (st == Store::f32) CHECK(worst_out > 0.0);  // the forms round differently: not a vacuous comparison
    // The padding sequence's outputs are zero and the empty sequence's slot is untouched.
    for (int64_t i = cu[N - 2] * row; i < cu[N - 1] * row; ++i) CHECK(out_c[i] == 0.0f);
    CHECK(std::memcmp(st_c.data() + (N - 1) * slot_size, state0.data() + (N - 1) * slot_size,
                      slot_size * sizeof(float)) == 0);
    // The metric sees a real difference: ignoring the history is far outside the tolerance.
    if (regime == 2) {
      std::vector<uint8_t> no_hist(N, 0);
      std::vector<float> st_x = state0, out_x(T * row, kNaN);
      delta_rule_prefill_chunked(s, N, cu.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                 slots.data(), no_hist.data(), st_x.data(), out_x.data(), chunk);
      const int n = int(lens.size()) + 1;  // second length, with history
      CHECK(norm_err(out_x.data() + cu[n] * row, out_r.data() + cu[n] * row, (cu[n + 1] - cu[n]) * row) >
            10 * kTolBf16);
    }
  }
}

TEST_CASE("delta rule: chunked prefill with unusual chunk sizes", "[ref][delta_rule]") {
  const int chunk = GENERATE(1, 7, 200, 1000);
  CAPTURE(chunk);
  const DeltaShape s{1, 2, 16, 16, Store::f32};
  const std::vector<int32_t> cu = {0, 150, 170}, slots = {1, 0};
  const std::vector<uint8_t> hist = {1, 0};
  const auto in = make_inputs(s, 170, 121, -0.5f, 0.f);
  const auto state0 = test::uniform(2 * s.Hv * head_size(s), 122);
  std::vector<float> st_r = state0, st_c = state0, out_r(170 * 32), out_c(170 * 32);
  delta_rule_prefill_recurrent(s, 2, cu.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                               slots.data(), hist.data(), st_r.data(), out_r.data());
  delta_rule_prefill_chunked(s, 2, cu.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                             slots.data(), hist.data(), st_c.data(), out_c.data(), chunk);
  CHECK(norm_err(out_c.data(), out_r.data(), int64_t(out_r.size())) <= kTolF32);
  CHECK(norm_err(st_c.data(), st_r.data(), int64_t(st_r.size())) <= kTolF32);
}

TEST_CASE("delta rule: argument validation throws", "[ref][delta_rule]") {
  const DeltaShape ok{1, 2, 2, 2, Store::f32};
  std::vector<float> buf(64, 0.5f), state(64, 0.0f), out(64);
  const std::vector<int32_t> slots = {0, 1}, dup = {0, 0}, cu = {0, 1, 2}, bad_cu = {0, 2, 1};
  const std::vector<uint8_t> hist = {0, 1};
  const float* p = buf.data();
  auto dec = [&](DeltaShape s, int B, const int32_t* sl, float* st) {
    delta_rule_decode(s, B, p, p, p, p, p, sl, st, out.data());
  };
  auto rec = [&](DeltaShape s, int N, const int32_t* c, const int32_t* sl, const uint8_t* h) {
    delta_rule_prefill_recurrent(s, N, c, p, p, p, p, p, sl, h, state.data(), out.data());
  };
  auto chk = [&](DeltaShape s, int N, const int32_t* c, int chunk) {
    delta_rule_prefill_chunked(s, N, c, p, p, p, p, p, slots.data(), hist.data(), state.data(), out.data(), chunk);
  };
  // The valid calls succeed (an exception here fails the test case).
  dec(ok, 2, slots.data(), state.data());
  rec(ok, 2, cu.data(), slots.data(), hist.data());
  chk(ok, 2, cu.data(), 64);
  CHECK_THROWS_AS(dec(DeltaShape{2, 3, 2, 2}, 2, slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(dec(DeltaShape{0, 2, 2, 2}, 2, slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(dec(DeltaShape{1, 2, 0, 2}, 2, slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(dec(DeltaShape{1, 2, 2, -2}, 2, slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(dec(ok, -1, slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(dec(ok, 2, nullptr, state.data()), std::invalid_argument);
  CHECK_THROWS_AS(dec(ok, 2, slots.data(), nullptr), std::invalid_argument);
  CHECK_THROWS_AS(dec(ok, 2, dup.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(rec(ok, -1, cu.data(), slots.data(), hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(rec(ok, 2, nullptr, slots.data(), hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(rec(ok, 2, bad_cu.data(), slots.data(), hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(rec(ok, 2, cu.data(), slots.data(), nullptr), std::invalid_argument);
  CHECK_THROWS_AS(rec(ok, 2, cu.data(), dup.data(), hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(rec(DeltaShape{3, 6, 2, 0}, 2, cu.data(), slots.data(), hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(chk(ok, 2, cu.data(), 0), std::invalid_argument);
  CHECK_THROWS_AS(chk(ok, 2, cu.data(), -64), std::invalid_argument);
  CHECK_THROWS_AS(chk(DeltaShape{2, 5, 2, 2}, 2, cu.data(), 64), std::invalid_argument);
  CHECK_THROWS_AS(chk(ok, 2, bad_cu.data(), 64), std::invalid_argument);
  CHECK_THROWS_AS(delta_rule_prefill_chunked(ok, 2, cu.data(), nullptr, p, p, p, p, slots.data(), hist.data(),
                                             state.data(), out.data()),
                  std::invalid_argument);
  std::string msg;
  try {
    chk(ok, 2, cu.data(), 0);
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  CHECK(msg == "delta_rule_prefill_chunked: chunk must be >= 1, got 0");
}
