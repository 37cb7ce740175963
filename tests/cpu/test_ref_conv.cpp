// CPU tests of the causal conv reference (kernels/ref/conv_ref.h): hand-computed tiny cases, the
// state-update rule, padding slots, strided inputs, and the bitwise equivalences between prefill,
// split prefill and decode that every GPU arm must also satisfy.
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/ref/conv_ref.h"
#include "tests/support/catch.h"
#include "tests/support/random.h"

using namespace sg;
using namespace sg::ref;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs conv_fwd on contiguous x [T, C] with outputs pre-filled with NaN (so every output must be
// written).
std::vector<float> run_fwd(const ConvShape& s, const std::vector<int32_t>& cu, const std::vector<float>& x,
                           const std::vector<int32_t>& slots, const std::vector<uint8_t>& hist,
                           std::vector<float>& state, const std::vector<float>& w, const float* bias) {
  const int N = static_cast<int>(slots.size());
  std::vector<float> out(static_cast<size_t>(cu[N]) * s.C, kNaN);
  conv_fwd(s, N, cu.data(), x.data(), s.C, slots.data(), hist.data(), state.data(), w.data(), bias, out.data());
  return out;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

// C = 2, K = 3. Weights and inputs are small dyadic numbers, so every f32 operation is exact and
// the expected values are plain arithmetic (worked out in the comments).
TEST_CASE("conv_fwd: hand-computed C=2 K=3", "[ref][conv]") {
  const std::vector<float> w = {1,    2,  3,  // channel 0, taps oldest .. current
                                0.5f, -1, 2};
  const std::vector<float> x = {1,    2,   // token 0: channel 0, channel 1
                                3,    -1,  // token 1
                                -2,   4,   // token 2
                                0.5f, 1};  // token 3
  const std::vector<int32_t> cu = {0, 4}, slots = {1};
  ConvShape s{2, 3, false, Store::f32, Store::f32};
  // Slot 1 of 2; slot 0 holds a marker that must survive.
  std::vector<float> state = {7, 7, 7, 7, 10, 20, -4, 8};

  SECTION("no history, no bias, silu off") {
    auto out = run_fwd(s, cu, x, slots, {0}, state, w, nullptr);
    // c0: 3*1 = 3; 2*1 + 3*3 = 11; 1*1 + 2*3 + 3*(-2) = 1; 1*3 + 2*(-2) + 3*0.5 = 0.5
    // c1: 2*2 = 4; -1*2 + 2*(-1) = -4; 0.5*2 + (-1)(-1) + 2*4 = 10; 0.5*(-1) + (-1)*4 + 2*1 = -2.5
    CHECK(out == std::vector<float>{3, 4, 11, -4, 1, 10, 0.5f, -2.5f});
    // New state: last two raw inputs per channel.
    CHECK(state == std::vector<float>{7, 7, 7, 7, -2, 0.5f, 4, 1});
  }
  SECTION("with history") {
    auto out = run_fwd(s, cu, x, slots, {1}, state, w, nullptr);
    // c0 history (10, 20): 1*10 + 2*20 + 3*1 = 53; 1*20 + 2*1 + 3*3 = 31
    // c1 history (-4, 8): 0.5*(-4) + (-1)*8 + 2*2 = -6; 0.5*8 + (-1)*2 + 2*(-1) = 0
    CHECK(out == std::vector<float>{53, -6, 31, 0, 1, 10, 0.5f, -2.5f});
    CHECK(state == std::vector<float>{7, 7, 7, 7, -2, 0.5f, 4, 1});
  }
  SECTION("with bias") {
    const std::vector<float> bias = {0.25f, -1};
    auto out = run_fwd(s, cu, x, slots, {1}, state, w, bias.data());
    CHECK(out == std::vector<float>{53.25f, -7, 31.25f, -1, 1.25f, 9, 0.75f, -3.5f});
  }
  SECTION("silu on") {
    s.silu = true;
    auto out = run_fwd(s, cu, x, slots, {1}, state, w, nullptr);
    // silu(53) = 53 (to f32), silu(-6) = -6/(1+e^6), silu(31) = 31, silu(0) = 0, silu(1),
    // silu(10), silu(0.5), silu(-2.5): known values.
    CHECK(out[0] == Approx(53.0).epsilon(1e-6));
    CHECK(out[1] == Approx(-0.0148357389).epsilon(1e-6));
    CHECK(out[2] == Approx(31.0).epsilon(1e-6));
    CHECK(out[3] == 0.0f);
    CHECK(out[4] == Approx(0.7310585786).epsilon(1e-6));
    CHECK(out[5] == Approx(9.9995460).epsilon(1e-6));
    CHECK(out[6] == Approx(0.3112296656).epsilon(1e-6));
    CHECK(out[7] == Approx(-0.1896454501).epsilon(1e-6));
    // And bit for bit the contract's formula.
    const std::vector<float> lin = {53, -6, 31, 0, 1, 10, 0.5f, -2.5f};
    for (size_t i = 0; i < lin.size(); ++i) CHECK(out[i] == silu(lin[i]));
  }
}

TEST_CASE("conv_update: hand-computed C=2 K=3 decode", "[ref][conv]") {
  const std::vector<float> w = {1, 2, 3, 0.5f, -1, 2};
  const std::vector<float> bias = {0.25f, -1};
  std::vector<float> state = {10, 20, -4, 8};  // one slot
  const std::vector<float> x = {1, 2};
  const std::vector<int32_t> slots = {0};
  ConvShape s{2, 3, false, Store::f32, Store::f32};
  std::vector<float> out(2, kNaN);
  conv_update(s, 1, x.data(), 2, slots.data(), state.data(), w.data(), bias.data(), out.data());
  // c0: 0.25 + 1*10 + 2*20 + 3*1 = 53.25; c1: -1 + 0.5*(-4) + (-1)*8 + 2*2 = -7
  CHECK(out == std::vector<float>{53.25f, -7});
  CHECK(state == std::vector<float>{20, 1, 8, 2});
  // A second step rolls again: c0 taps (20, 1, x=-1): 0.25 + 20 + 2 - 3 = 19.25.
  const std::vector<float> x2 = {-1, 0};
  conv_update(s, 1, x2.data(), 2, slots.data(), state.data(), w.data(), bias.data(), out.data());
  CHECK(out[0] == 19.25f);
  // c1 taps (8, 2, 0): -1 + 4 - 2 + 0 = 1
  CHECK(out[1] == 1.0f);
  CHECK(state == std::vector<float>{1, -1, 2, 0});
}

// The contract's operation order, transcribed literally, on random data where any reordering
// (bias added last, taps summed newest first, a plain multiply-add) changes the f32 bits.
TEST_CASE("conv: exact f32 operation order on random data", "[ref][conv]") {
  const int C = 3, K = 4, T = 6, H = K - 1;
  const bool silu_on = GENERATE(false, true);
  CAPTURE(silu_on);
  ConvShape s{C, K, silu_on, Store::f32, Store::f32};
  const auto w = test::uniform(C * K, 1);
  const auto bias = test::uniform(C, 2);
  const auto x = test::uniform(T * C, 3);
  const auto state0 = test::uniform(C * H, 4);
  auto expect = [&](int c, const float* taps) {
    float acc = bias[c];
    for (int j = 0; j < K; ++j) acc = std::fma(w[c * K + j], taps[j], acc);
    return silu_on ? acc / (1.0f + std::exp(-acc)) : acc;
  };
  std::vector<float> st = state0;
  auto out = run_fwd(s, {0, T}, x, {0}, {1}, st, w, bias.data());
  int mismatches = 0;
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) {
      float taps[K];
      for (int j = 0; j < K; ++j) {
        const int i = t - (K - 1 - j);
        taps[j] = i >= 0 ? x[i * C + c] : state0[c * H + H + i];
      }
      mismatches += out[t * C + c] != expect(c, taps);
    }
  CHECK(mismatches == 0);
  // Decode: taps are the state row then the new input.
  std::vector<float> st2 = state0, dec(C);
  const std::vector<int32_t> slot0 = {0};
  conv_update(s, 1, x.data(), C, slot0.data(), st2.data(), w.data(), bias.data(), dec.data());
  for (int c = 0; c < C; ++c) {
    const float taps[K] = {state0[c * H], state0[c * H + 1], state0[c * H + 2], x[c]};
    CHECK(dec[c] == expect(c, taps));
  }
}

TEST_CASE("conv state update when the segment is shorter than K-1", "[ref][conv]") {
  // K = 4: three state entries per channel. C = 1, raw inputs stored as f32.
  ConvShape s{1, 4, false, Store::f32, Store::f32};
  const std::vector<float> w = {1, 10, 100, 1000};
  std::vector<float> state = {1, 2, 3};
  SECTION("one token with history: [b, c, x]") {
    auto out = run_fwd(s, {0, 1}, {5}, {0}, {1}, state, w, nullptr);
    CHECK(out[0] == 1 * 1 + 10 * 2 + 100 * 3 + 1000 * 5.0f);
    CHECK(state == std::vector<float>{2, 3, 5});
  }
  SECTION("two tokens with history: [c, x0, x1]") {
    auto out = run_fwd(s, {0, 2}, {5, 6}, {0}, {1}, state, w, nullptr);
    CHECK(out[1] == 1 * 2 + 10 * 3 + 100 * 5 + 1000 * 6.0f);
    CHECK(state == std::vector<float>{3, 5, 6});
  }
  SECTION("one token without history: [0, 0, x]") {
    auto out = run_fwd(s, {0, 1}, {5}, {0}, {0}, state, w, nullptr);
    CHECK(out[0] == 5000.0f);
    CHECK(state == std::vector<float>{0, 0, 5});
  }
  SECTION("two tokens without history: [0, x0, x1]") {
    run_fwd(s, {0, 2}, {5, 6}, {0}, {0}, state, w, nullptr);
    CHECK(state == std::vector<float>{0, 5, 6});
  }
  SECTION("exactly K-1 tokens replace the state") {
    run_fwd(s, {0, 3}, {5, 6, 7}, {0}, {1}, state, w, nullptr);
    CHECK(state == std::vector<float>{5, 6, 7});
  }
  SECTION("zero-length sequence leaves the state as it was, with or without history") {
    const uint8_t h = GENERATE(uint8_t{0}, uint8_t{1});
    auto out = run_fwd(s, {0, 0}, {}, {0}, {h}, state, w, nullptr);
    CHECK(out.empty());
    CHECK(state == std::vector<float>{1, 2, 3});
  }
  SECTION("K = 1 has no state: out = w * x") {
    ConvShape s1{1, 1, false, Store::f32, Store::f32};
    std::vector<float> none;
    auto out = run_fwd(s1, {0, 2}, {5, 6}, {0}, {1}, none, {3}, nullptr);
    CHECK(out == std::vector<float>{15, 18});
  }
}

TEST_CASE("conv: padding slot leaves the state bitwise untouched and writes zeros", "[ref][conv]") {
  const int C = 5, K = 4, slots_n = 3;
  ConvShape s{C, K, true, Store::bf16, Store::bf16};
  const auto w = test::uniform_bf16(C * K, 11);
  const auto bias = test::uniform_bf16(C, 12);
  const auto state0 = test::uniform_bf16(slots_n * C * (K - 1), 13);
  const auto x = test::uniform_bf16(9 * C, 14);
  std::vector<float> state = state0;
  SECTION("prefill: every sequence padding, one with history") {
    auto out = run_fwd(s, {0, 2, 2, 9}, x, {-1, -1, -1}, {1, 0, 1}, state, w, bias.data());
    CHECK(same_bits(state, state0));
    for (float o : out) CHECK(o == 0.0f);
  }
  SECTION("prefill: padding next to a real sequence touches only the real slot") {
    auto out = run_fwd(s, {0, 4, 9}, x, {-1, 2}, {1, 1}, state, w, bias.data());
    for (int i = 0; i < 4 * C; ++i) CHECK(out[i] == 0.0f);
    for (int i = 4 * C; i < 9 * C; ++i) CHECK(out[i] != 0.0f);
    const size_t slot_size = C * (K - 1);
    CHECK(std::memcmp(state.data(), state0.data(), 2 * slot_size * sizeof(float)) == 0);
    CHECK(!same_bits(state, state0));
  }
  SECTION("decode") {
    const std::vector<int32_t> slots = {-1, -1};
    std::vector<float> out(2 * C, kNaN);
    conv_update(s, 2, x.data(), C, slots.data(), state.data(), w.data(), bias.data(), out.data());
    CHECK(same_bits(state, state0));
    for (float o : out) CHECK(o == 0.0f);
  }
}

TEST_CASE("conv: strided x never reads the padding columns", "[ref][conv]") {
  const int C = 7, K = GENERATE(2, 3, 4, 5);
  const int64_t stride = C + 3;
  CAPTURE(K);
  ConvShape s{C, K, true, Store::f32, Store::bf16};
  const auto w = test::uniform(C * K, 21);
  const int T = 11;
  const auto xc = test::uniform_bf16(T * C, 22);  // contiguous copy
  std::vector<float> xs(T * stride, kNaN);        // strided, NaN in columns C..stride-1
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < C; ++c) xs[t * stride + c] = xc[t * C + c];
  const auto state0 = test::uniform_bf16(2 * C * (K - 1), 23);
  const std::vector<int32_t> cu = {0, 2, 2, 11}, slots = {1, -1, 0};
  const std::vector<uint8_t> hist = {1, 1, 1};

  std::vector<float> st_c = state0, st_s = state0, out_c(T * C, kNaN), out_s(T * C, kNaN);
  conv_fwd(s, 3, cu.data(), xc.data(), C, slots.data(), hist.data(), st_c.data(), w.data(), nullptr, out_c.data());
  conv_fwd(s, 3, cu.data(), xs.data(), stride, slots.data(), hist.data(), st_s.data(), w.data(), nullptr, out_s.data());
  for (float o : out_s) CHECK(!std::isnan(o));
  CHECK(same_bits(out_s, out_c));
  CHECK(same_bits(st_s, st_c));

  std::vector<float> dec_c(2 * C, kNaN), dec_s(2 * C, kNaN);
  const std::vector<int32_t> dslots = {0, 1};
  conv_update(s, 2, xc.data(), C, dslots.data(), st_c.data(), w.data(), nullptr, dec_c.data());
  conv_update(s, 2, xs.data(), stride, dslots.data(), st_s.data(), w.data(), nullptr, dec_s.data());
  for (float o : dec_s) CHECK(!std::isnan(o));
  CHECK(same_bits(dec_s, dec_c));
  CHECK(same_bits(st_s, st_c));
}

TEST_CASE("conv: prefill of n tokens then n..n+m by decode equals one prefill (bitwise)", "[ref][conv]") {
  const int K = GENERATE(2, 3, 4, 5);
  const int n = GENERATE(0, 1, 2, 3, 6);
  const int hist = GENERATE(0, 1);
  const bool bf16 = GENERATE(false, true);
  CAPTURE(K, n, hist, bf16);
  if (n == 0 && hist == 0) return;  // a zero-length prefill without history defines no state
  const int C = 9, m = 5;
  // bf16 state with bf16-representable x: storing the raw inputs loses nothing, so decode (which
  // reads older taps from the state) sees exactly what the long prefill sees.
  ConvShape s{C, K, true, bf16 ? Store::bf16 : Store::f32, bf16 ? Store::bf16 : Store::f32};
  const auto w = test::uniform(C * K, 31);
  const auto bias = test::uniform(C, 32);
  const auto x = bf16 ? test::uniform_bf16((n + m) * C, 33 + n) : test::uniform((n + m) * C, 33 + n);
  const auto state0 = test::uniform_bf16(C * (K - 1), 34);
  const std::vector<uint8_t> h = {static_cast<uint8_t>(hist)};

  std::vector<float> st_one = state0;
  auto out_one = run_fwd(s, {0, n + m}, x, {0}, h, st_one, w, bias.data());

  std::vector<float> st_two = state0;
  std::vector<float> x_head(x.begin(), x.begin() + n * C);
  auto out_two = run_fwd(s, {0, n}, x_head, {0}, h, st_two, w, bias.data());
  const std::vector<int32_t> slot0 = {0};
  for (int t = n; t < n + m; ++t) {
    std::vector<float> o(C, kNaN);
    conv_update(s, 1, x.data() + t * C, C, slot0.data(), st_two.data(), w.data(), bias.data(), o.data());
    out_two.insert(out_two.end(), o.begin(), o.end());
  }
  CHECK(same_bits(out_two, out_one));
  CHECK(same_bits(st_two, st_one));
}

TEST_CASE("conv: prefill split into two segments equals one prefill (bitwise)", "[ref][conv]") {
  const int K = GENERATE(2, 4, 5);
  const bool bf16 = GENERATE(false, true);
  CAPTURE(K, bf16);
  const int C = 6;
  ConvShape s{C, K, true, bf16 ? Store::bf16 : Store::f32, bf16 ? Store::bf16 : Store::f32};
  const auto w = test::uniform(C * K, 41);
  // Six sequences in one varlen batch; (first, second) segment lengths include 0, 1, < K-1 and
  // sequences much longer than one 8-token chunk (the seed's history regression shape: 33, 37).
  const std::vector<int> first = {0, 1, 2, 33, 5, 0}, second = {3, 0, 1, 37, 2, 2};
  const std::vector<int32_t> slots = {4, 0, 3, 1, 2, 5};
  const std::vector<uint8_t> hist0 = {1, 0, 1, 1, 0, 0};  // history before the first segment
  const int N = 6, H = K - 1;
  std::vector<int32_t> cu_one = {0}, cu_a = {0}, cu_b = {0};
  for (int i = 0; i < N; ++i) {
    cu_one.push_back(cu_one.back() + first[i] + second[i]);
    cu_a.push_back(cu_a.back() + first[i]);
    cu_b.push_back(cu_b.back() + second[i]);
  }
  const auto x = bf16 ? test::uniform_bf16(cu_one[N] * C, 42) : test::uniform(cu_one[N] * C, 42);
  const auto state0 = test::uniform_bf16(N * C * H, 43);
  // Split the packed stream into the two calls' packed streams.
  std::vector<float> xa, xb;
  for (int i = 0; i < N; ++i) {
    auto seq = x.begin() + cu_one[i] * C;
    xa.insert(xa.end(), seq, seq + first[i] * C);
    xb.insert(xb.end(), seq + first[i] * C, seq + (first[i] + second[i]) * C);
  }
  std::vector<float> st_one = state0, st_two = state0;
  auto out_one = run_fwd(s, cu_one, x, slots, hist0, st_one, w, nullptr);
  auto out_a = run_fwd(s, cu_a, xa, slots, hist0, st_two, w, nullptr);
  // Second segment: history wherever the first segment wrote a state or kept one (a zero-length
  // first segment leaves the state alone, so without earlier history there is still none).
  std::vector<uint8_t> hist_b(N);
  for (int i = 0; i < N; ++i) hist_b[i] = (first[i] > 0 || hist0[i]) ? 1 : 0;
  auto out_b = run_fwd(s, cu_b, xb, slots, hist_b, st_two, w, nullptr);
  std::vector<float> out_two;
  for (int i = 0; i < N; ++i) {
    out_two.insert(out_two.end(), out_a.begin() + cu_a[i] * C, out_a.begin() + cu_a[i + 1] * C);
    out_two.insert(out_two.end(), out_b.begin() + cu_b[i] * C, out_b.begin() + cu_b[i + 1] * C);
  }
  CHECK(same_bits(out_two, out_one));
  CHECK(same_bits(st_two, st_one));
}

TEST_CASE("conv: bf16 stores round outputs and state, f32 stores do not", "[ref][conv]") {
  const int C = 16, K = 4, T = 12;
  const auto w = test::uniform(C * K, 51);
  const auto x = test::uniform(T * C, 52);  // not bf16-representable
  const auto state0 = test::uniform(C * (K - 1), 53);
  auto count_bf16 = [](const std::vector<float>& v) {
    int n = 0;
    for (float f : v) n += round_bf16(f) == f;
    return n;
  };
  std::vector<float> st = state0;
  auto out = run_fwd(ConvShape{C, K, true, Store::bf16, Store::bf16}, {0, T}, x, {0}, {1}, st, w, nullptr);
  CHECK(count_bf16(out) == T * C);
  CHECK(count_bf16(st) == C * (K - 1));
  // The state holds round_bf16 of the last K-1 raw inputs.
  for (int c = 0; c < C; ++c)
    for (int j = 0; j < K - 1; ++j) CHECK(st[c * (K - 1) + j] == round_bf16(x[(T - (K - 1) + j) * C + c]));

  std::vector<float> st32 = state0;
  auto out32 = run_fwd(ConvShape{C, K, true, Store::f32, Store::f32}, {0, T}, x, {0}, {1}, st32, w, nullptr);
  CHECK(count_bf16(out32) < T * C / 2);
  CHECK(count_bf16(st32) < C * (K - 1) / 2);
  for (int i = 0; i < T * C; ++i) CHECK(out[i] == round_bf16(out32[i]));

  std::vector<float> dec(C, kNaN);
  const std::vector<int32_t> slot0 = {0};
  conv_update(ConvShape{C, K, true, Store::bf16, Store::bf16}, 1, x.data(), C, slot0.data(), st.data(), w.data(),
              nullptr, dec.data());
  CHECK(count_bf16(dec) == C);
  CHECK(count_bf16(st) == C * (K - 1));
}

TEST_CASE("conv: argument validation throws", "[ref][conv]") {
  const std::vector<float> w(8, 1.0f), x(8, 1.0f);
  std::vector<float> state(8, 0.0f), out(8);
  const std::vector<int32_t> slots = {0, 1}, dup = {1, 1}, cu = {0, 1, 2}, bad_cu0 = {1, 1, 2}, bad_cu = {0, 2, 1};
  const std::vector<uint8_t> hist = {0, 0};
  const ConvShape ok{2, 2};
  auto upd = [&](ConvShape s, int B, int64_t stride, const float* xp, const int32_t* sl, float* st) {
    conv_update(s, B, xp, stride, sl, st, w.data(), nullptr, out.data());
  };
  auto fwd = [&](ConvShape s, int N, const int32_t* c, int64_t stride, const uint8_t* h) {
    conv_fwd(s, N, c, x.data(), stride, slots.data(), h, state.data(), w.data(), nullptr, out.data());
  };
  // The valid calls succeed (an exception here fails the test case).
  upd(ok, 2, 2, x.data(), slots.data(), state.data());
  fwd(ok, 2, cu.data(), 2, hist.data());
  CHECK_THROWS_AS(upd(ConvShape{0, 2}, 2, 2, x.data(), slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(upd(ConvShape{-1, 2}, 2, 2, x.data(), slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(upd(ConvShape{2, 0}, 2, 2, x.data(), slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(upd(ok, -1, 2, x.data(), slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(upd(ok, 2, 1, x.data(), slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(upd(ok, 2, 2, nullptr, slots.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(upd(ok, 2, 2, x.data(), nullptr, state.data()), std::invalid_argument);
  CHECK_THROWS_AS(upd(ok, 2, 2, x.data(), slots.data(), nullptr), std::invalid_argument);
  CHECK_THROWS_AS(upd(ok, 2, 2, x.data(), dup.data(), state.data()), std::invalid_argument);
  CHECK_THROWS_AS(fwd(ConvShape{2, 0}, 2, cu.data(), 2, hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(fwd(ok, -1, cu.data(), 2, hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(fwd(ok, 2, cu.data(), 1, hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(fwd(ok, 2, nullptr, 2, hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(fwd(ok, 2, bad_cu0.data(), 2, hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(fwd(ok, 2, bad_cu.data(), 2, hist.data()), std::invalid_argument);
  CHECK_THROWS_AS(fwd(ok, 2, cu.data(), 2, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(
      conv_fwd(ok, 2, cu.data(), x.data(), 2, dup.data(), hist.data(), state.data(), w.data(), nullptr, out.data()),
      std::invalid_argument);
  CHECK_THROWS_AS(
      conv_fwd(ok, 2, cu.data(), x.data(), 2, slots.data(), hist.data(), state.data(), nullptr, nullptr, out.data()),
      std::invalid_argument);
  CHECK_THROWS_AS(
      conv_fwd(ok, 2, cu.data(), x.data(), 2, slots.data(), hist.data(), state.data(), w.data(), nullptr, nullptr),
      std::invalid_argument);
  // The message names the op and the problem.
  std::string msg;
  try {
    upd(ConvShape{2, 0}, 2, 2, x.data(), slots.data(), state.data());
  } catch (const std::invalid_argument& e) {
    msg = e.what();
  }
  CHECK(msg == "conv_update: K must be >= 1, got 0");
}
