// CPU tests of the delta-rule reference with a bf16 recurrent state (DeltaShape::state =
// Store::bf16, kernels/ref/delta_rule_ref.h): the arithmetic is the f32 (or double) one, and only
// the stored state is rounded to nearest-even bf16, in the documented places:
// - decode: each step's state rounded (a hand-computed tie that rounds to even, then random heads:
//   the f32 run's state rounded, the f32 run's outputs bit for bit, padding rows and unused slots
//   untouched, every element bf16);
// - recurrent prefill: the final state of each sequence rounded once (the f32 prefill's outputs bit
//   for bit, so the state was not rounded between tokens; its final state rounded), padding,
//   zero-length sequences and unused slots untouched;
// - prefill then decode: each decode step rounds (an f32 step plus a rounding per step, bit for
//   bit), so it is not the longer prefill (which rounds once);
// - chunked prefill: the double -> f32 final state rounded once, the outputs of the f32 run.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/numeric.h"
#include "kernels/ref/delta_rule_ref.h"
#include "tests/support/catch.h"
#include "tests/support/random.h"

using namespace sg;
using namespace sg::ref;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> rounded(std::vector<float> x) {
  for (float& e : x) e = round_bf16(e);
  return x;
}

size_t not_bf16(const std::vector<float>& x) {
  size_t n = 0;
  for (float e : x) {
    const float r = round_bf16(e);
    n += std::memcmp(&e, &r, sizeof(float)) != 0;
  }
  return n;
}

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

// q, k L2-normalised per head, v in [-1, 1], g in [-2, 0], beta in (0, 1); all bf16 values (as a
// bf16 model step gives them), though only the state's values must be.
struct Inputs {
  std::vector<float> q, k, v, g, beta;
};
Inputs make_inputs(const DeltaShape& s, int T, uint64_t seed) {
  Inputs in;
  in.q = test::uniform(size_t(T) * s.Hk * s.Dk, seed);
  in.k = test::uniform(size_t(T) * s.Hk * s.Dk, seed + 1);
  in.v = rounded(test::uniform(size_t(T) * s.Hv * s.Dv, seed + 2));
  in.g = test::uniform(size_t(T) * s.Hv, seed + 3, -2.f, 0.f);
  in.beta = test::uniform(size_t(T) * s.Hv, seed + 4, 0.f, 1.f);
  for (auto* x : {&in.q, &in.k}) {
    for (size_t h = 0; h < x->size() / s.Dk; ++h) {
      float* p = x->data() + h * s.Dk;
      double n2 = 0;
      for (int i = 0; i < s.Dk; ++i) n2 += double(p[i]) * p[i];
      for (int i = 0; i < s.Dk; ++i) p[i] = round_bf16(float(p[i] / std::sqrt(n2)));
    }
  }
  return in;
}

DeltaShape with_state(DeltaShape s, Store st) {
  s.state = st;
  return s;
}

}  // namespace

// Hk = Hv = 1, Dk = Dv = 2, S0 = [[1, 2], [3, 4]], k = (1, 0), q = (1, 1), beta = 0.5, g = 0,
// v = (5 + 3 * 2^-6, 6): u = (2 + 3 * 2^-7, 2), S = [[3 + 3 * 2^-7, 4], [3, 4]] in f32. In [2, 4)
// bf16 values are 2^-6 apart: 3 + 3 * 2^-7 lies halfway between 3 + 2^-6 (odd mantissa) and
// 3 + 2^-5 (even), so round-to-nearest-even gives 3 + 2^-5 (truncation would give 3 + 2^-6).
TEST_CASE("delta_rule_decode, bf16 state: hand-computed tie rounds to even, outputs from the f32 state",
          "[ref][delta_rule][ssm_state]") {
  const DeltaShape s{1, 1, 2, 2, Store::f32, Store::bf16};
  std::vector<float> state = {1, 2, 3, 4};
  const std::vector<float> q = {1, 1}, k = {1, 0}, v = {5.0f + 3.0f / 64, 6}, beta = {0.5f}, g = {0.0f};
  const std::vector<int32_t> slots = {0};
  std::vector<float> out(2, kNaN);
  delta_rule_decode(s, 1, q.data(), k.data(), v.data(), g.data(), beta.data(), slots.data(), state.data(), out.data());
  const float s00 = 3.0f + 3.0f / 128;  // the f32 state element before rounding
  CHECK(state == std::vector<float>{3.0f + 1.0f / 32, 4, 3, 4});
  const float r2 = 1.0f / std::sqrt(2.0f);
  CHECK(out[0] == std::fma(3.0f, r2, s00 * r2));  // o from the unrounded state: (q r2) . S column 0
  CHECK(out[0] != std::fma(3.0f, r2, state[0] * r2));
  CHECK(out[1] == std::fma(4.0f, r2, 4.0f * r2));
}

TEST_CASE("delta_rule_decode, bf16 state: the f32 step's state rounded, its outputs, padding untouched",
          "[ref][delta_rule][ssm_state]") {
  const DeltaShape base{2, 4, 32, 16, Store::bf16};
  const int B = 6, num_slots = 8;
  const auto in = make_inputs(base, B, 501);
  const std::vector<int32_t> slots = {3, -1, 0, 6, -1, 1};  // slots 2, 4, 5, 7 unused
  const auto state0 = rounded(test::uniform(size_t(num_slots) * base.Hv * base.Dk * base.Dv, 502, -0.5f, 0.5f));
  std::vector<float> st32 = state0, st16 = state0, out32(size_t(B) * base.Hv * base.Dv, kNaN), out16 = out32;
  delta_rule_decode(with_state(base, Store::f32), B, in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                    slots.data(), st32.data(), out32.data());
  delta_rule_decode(with_state(base, Store::bf16), B, in.q.data(), in.k.data(), in.v.data(), in.g.data(),
                    in.beta.data(), slots.data(), st16.data(), out16.data());
  CHECK(same_bits(out16, out32));         // the outputs come from the f32 state, before it is stored
  CHECK(same_bits(st16, rounded(st32)));  // every written element rounded once, to nearest even
  CHECK(not_bf16(st16) == 0);             // so the buffer holds bf16 values only
  CHECK(differing(st16, st32) > 1000);    // the rounding changed most written elements (not a no-op)
  CHECK(not_bf16(st32) > 1000);           // and the f32 setting does not round
  const size_t slot_size = size_t(base.Hv) * base.Dk * base.Dv;
  for (int sl : {2, 4, 5, 7}) {  // unused (and the padding rows' would-be) slots: bitwise untouched
    CAPTURE(sl);
    CHECK(std::memcmp(st16.data() + sl * slot_size, state0.data() + sl * slot_size, slot_size * sizeof(float)) == 0);
  }
  const size_t row = size_t(base.Hv) * base.Dv;
  for (int r : {1, 4})
    for (size_t i = 0; i < row; ++i) CHECK(out16[r * row + i] == 0.0f);
}

TEST_CASE("delta_rule_prefill_recurrent, bf16 state: the f32 prefill, its final state rounded once",
          "[ref][delta_rule][ssm_state]") {
  const DeltaShape base{1, 2, 16, 8, Store::f32};
  const int num_slots = 6;
  // Sequences: 37 tokens with history, 1 without, a padding one, a zero-length one (slot 4, no
  // history: its state must stay), 20 tokens without history.
  const std::vector<int32_t> cu = {0, 37, 38, 45, 45, 65}, slots = {2, 0, -1, 4, 5};
  const std::vector<uint8_t> hist = {1, 0, 1, 0, 0};
  const int N = 5, T = 65;
  const auto in = make_inputs(base, T, 601);
  const auto state0 = rounded(test::uniform(size_t(num_slots) * base.Hv * base.Dk * base.Dv, 602, -0.5f, 0.5f));
  std::vector<float> st32 = state0, st16 = state0, out32(size_t(T) * base.Hv * base.Dv, kNaN), out16 = out32;
  delta_rule_prefill_recurrent(with_state(base, Store::f32), N, cu.data(), in.q.data(), in.k.data(), in.v.data(),
                               in.g.data(), in.beta.data(), slots.data(), hist.data(), st32.data(), out32.data());
  delta_rule_prefill_recurrent(with_state(base, Store::bf16), N, cu.data(), in.q.data(), in.k.data(), in.v.data(),
                               in.g.data(), in.beta.data(), slots.data(), hist.data(), st16.data(), out16.data());
  // Bit-equal outputs over all tokens: the state stayed f32 between the tokens of a sequence (a
  // rounding per token would change the later tokens' outputs).
  CHECK(same_bits(out16, out32));
  CHECK(same_bits(st16, rounded(st32)));
  CHECK(not_bf16(st16) == 0);
  CHECK(differing(st16, st32) > 100);
  const size_t slot_size = size_t(base.Hv) * base.Dk * base.Dv;
  for (int sl : {1, 3, 4}) {  // unused, unused, the zero-length sequence's
    CAPTURE(sl);
    CHECK(std::memcmp(st16.data() + sl * slot_size, state0.data() + sl * slot_size, slot_size * sizeof(float)) == 0);
  }
  const size_t row = size_t(base.Hv) * base.Dv;
  for (size_t i = 38 * row; i < 45 * row; ++i) CHECK(out16[i] == 0.0f);  // the padding sequence's rows
}

// A recurrent prefill of n tokens then m decode steps, all with a bf16 state: the prefill rounds
// its final state once, then every decode step rounds its own. The same chain with the f32 state
// and an explicit rounding after the prefill and after each step gives the same bits; the single
// prefill of n + m tokens (one rounding) does not.
TEST_CASE("delta rule, bf16 state: prefill then decode rounds after the prefill and after each decode step",
          "[ref][delta_rule][ssm_state]") {
  const int n = GENERATE(1, 9, 40);
  const int hist = GENERATE(0, 1);
  CAPTURE(n, hist);
  const DeltaShape base{2, 4, 16, 8, Store::bf16};
  const int m = 4, T = n + m;
  const auto in = make_inputs(base, T, 701 + n);
  const auto state0 = rounded(test::uniform(size_t(base.Hv) * base.Dk * base.Dv, 702, -0.5f, 0.5f));
  const std::vector<int32_t> slot0 = {0}, cu_n = {0, n}, cu_all = {0, T};
  const std::vector<uint8_t> h = {uint8_t(hist)};
  const int64_t row = int64_t(base.Hv) * base.Dv, qk = int64_t(base.Hk) * base.Dk;
  auto chain = [&](Store st, bool round_by_hand, std::vector<float>& state, std::vector<float>& out) {
    const DeltaShape s = with_state(base, st);
    delta_rule_prefill_recurrent(s, 1, cu_n.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(),
                                 slot0.data(), h.data(), state.data(), out.data());
    if (round_by_hand) state = rounded(state);
    for (int t = n; t < T; ++t) {
      delta_rule_decode(s, 1, in.q.data() + t * qk, in.k.data() + t * qk, in.v.data() + t * row,
                        in.g.data() + t * base.Hv, in.beta.data() + t * base.Hv, slot0.data(), state.data(),
                        out.data() + t * row);
      if (round_by_hand) state = rounded(state);
    }
  };
  std::vector<float> st16 = state0, out16(T * row, kNaN);
  chain(Store::bf16, false, st16, out16);
  std::vector<float> by_hand = state0, out_hand(T * row, kNaN);
  chain(Store::f32, true, by_hand, out_hand);
  CHECK(same_bits(st16, by_hand));
  CHECK(same_bits(out16, out_hand));
  CHECK(not_bf16(st16) == 0);
  // Without the roundings between the steps (the f32 chain): other outputs after the prefill.
  std::vector<float> st32 = state0, out32(T * row, kNaN);
  chain(Store::f32, false, st32, out32);
  CHECK(differing(out16, out32) > 0);
  // One prefill of all n + m tokens rounds once, at the end: not the chain's bits.
  std::vector<float> st_one = state0, out_one(T * row, kNaN);
  delta_rule_prefill_recurrent(with_state(base, Store::bf16), 1, cu_all.data(), in.q.data(), in.k.data(), in.v.data(),
                               in.g.data(), in.beta.data(), slot0.data(), h.data(), st_one.data(), out_one.data());
  CHECK(differing(st_one, st16) > 0);
  CHECK(same_bits(st_one, rounded(st32)));  // ... but the f32 chain's state, rounded once
}

TEST_CASE("delta_rule_prefill_chunked, bf16 state: the double -> f32 final state rounded once",
          "[ref][delta_rule][ssm_state]") {
  const DeltaShape base{1, 2, 16, 8, Store::bf16};
  const std::vector<int32_t> cu = {0, 70, 70, 75, 80}, slots = {1, 3, -1, 0};
  const std::vector<uint8_t> hist = {1, 1, 0, 0};
  const int N = 4, T = 80, num_slots = 5;
  const auto in = make_inputs(base, T, 801);
  const auto state0 = rounded(test::uniform(size_t(num_slots) * base.Hv * base.Dk * base.Dv, 802, -0.5f, 0.5f));
  std::vector<float> st32 = state0, st16 = state0, out32(size_t(T) * base.Hv * base.Dv, kNaN), out16 = out32;
  delta_rule_prefill_chunked(with_state(base, Store::f32), N, cu.data(), in.q.data(), in.k.data(), in.v.data(),
                             in.g.data(), in.beta.data(), slots.data(), hist.data(), st32.data(), out32.data(), 16);
  delta_rule_prefill_chunked(with_state(base, Store::bf16), N, cu.data(), in.q.data(), in.k.data(), in.v.data(),
                             in.g.data(), in.beta.data(), slots.data(), hist.data(), st16.data(), out16.data(), 16);
  CHECK(same_bits(out16, out32));  // the state stays double across the chunks
  CHECK(same_bits(st16, rounded(st32)));
  CHECK(not_bf16(st16) == 0);
  CHECK(differing(st16, st32) > 100);
  const size_t slot_size = size_t(base.Hv) * base.Dk * base.Dv;
  for (int sl : {2, 3, 4}) {  // unused, the zero-length sequence's, unused
    CAPTURE(sl);
    CHECK(std::memcmp(st16.data() + sl * slot_size, state0.data() + sl * slot_size, slot_size * sizeof(float)) == 0);
  }
}
