// CPU tests of the reference gated attention (kernels/ref/attention_ref.h): hand cases (one key,
// two keys with the D^-0.5 scale), causality, the GQA head mapping, varlen packing, history vs
// one prefill, decode vs prefill, large logits, padding rows, a double-precision cross-check,
// the q/gate split, bf16 storage and argument validation.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "kernels/numeric.h"
#include "kernels/ref/attention_ref.h"
#include "tests/support/catch.h"
#include "tests/support/random.h"

using namespace sg;
using namespace sg::ref;

namespace {

struct Inputs {
  std::vector<float> q, k, v, gate;  // [T, Hq, D], [T, Hkv, D], [T, Hkv, D], [T, Hq, D]
};

Inputs random_inputs(int64_t T, int Hq, int Hkv, int D, uint64_t seed) {
  return {test::uniform_bf16(T * Hq * D, seed, -1.5f, 1.5f), test::uniform_bf16(T * Hkv * D, seed + 1, -1.5f, 1.5f),
          test::uniform_bf16(T * Hkv * D, seed + 2, -2.f, 2.f), test::uniform_bf16(T * Hq * D, seed + 3, -3.f, 3.f)};
}

// One sequence, no history.
std::vector<float> prefill1(const Inputs& in, int64_t T, int Hq, int Hkv, int D, Store s = Store::f32) {
  std::vector<float> out(T * Hq * D);
  const int32_t cu[2] = {0, static_cast<int32_t>(T)};
  attention_prefill(in.q.data(), in.k.data(), in.v.data(), in.gate.data(), cu, nullptr, out.data(), T, 1, Hq, Hkv, D,
                    s);
  return out;
}

std::vector<float> slice(const std::vector<float>& a, int64_t begin, int64_t end) {
  return std::vector<float>(a.begin() + begin, a.begin() + end);
}

// Independent double-precision evaluation of one sequence without history (the textbook form).
std::vector<double> naive(const Inputs& in, int64_t T, int Hq, int Hkv, int D) {
  std::vector<double> out(T * Hq * D);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < Hq; ++h) {
      const int g = h * Hkv / Hq;
      std::vector<double> p(t + 1);
      double mx = -1e300, z = 0;
      for (int64_t j = 0; j <= t; ++j) {
        double s = 0;
        for (int d = 0; d < D; ++d) s += double(in.q[(t * Hq + h) * D + d]) * in.k[(j * Hkv + g) * D + d];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      for (auto& x : p) z += (x = std::exp(x - mx));
      for (int d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t j = 0; j <= t; ++j) o += p[j] / z * in.v[(j * Hkv + g) * D + d];
        const double gt = in.gate[(t * Hq + h) * D + d];
        out[(t * Hq + h) * D + d] = o / (1 + std::exp(-gt));
      }
    }
  }
  return out;
}

double sigmoid_d(double x) { return 1.0 / (1.0 + std::exp(-x)); }

}  // namespace

TEST_CASE("attention with one key is v * sigmoid(gate)", "[ref][attention]") {
  const int D = 4;
  Inputs in{{0.3f, -2.f, 5.f, 1.f}, {1.f, 2.f, -1.f, 0.5f}, {1.f, -2.f, 3.f, 0.25f}, {0.f, 1.f, -2.f, 4.f}};
  auto out = prefill1(in, 1, 1, 1, D);
  for (int d = 0; d < D; ++d) CHECK(out[d] == Approx(in.v[d] * sigmoid_d(in.gate[d])).epsilon(1e-6));
}

TEST_CASE("attention by hand: two keys, scale D^-0.5", "[ref][attention]") {
  // D = 4, q = 1s, k1 = (ln 3 / 2) * 1s: logit = 4 * ln3/2 * 4^-0.5 = ln 3, so p = {1/4, 3/4}.
  const int D = 4;
  const float a = static_cast<float>(std::log(3.0) / 2);
  Inputs in;
  in.q = {0, 0, 0, 0, 1, 1, 1, 1};
  in.k = {0, 0, 0, 0, a, a, a, a};
  in.v = {4, 4, 4, 4, 8, 8, 8, 8};
  in.gate = {0, 0, 0, 0, 0, 0, 0, 30};  // sigmoid 0.5, and ~1 for the last feature
  auto out = prefill1(in, 2, 1, 1, D);
  for (int d = 0; d < D; ++d) CHECK(out[d] == Approx(2.0).epsilon(1e-6));      // 4 * 0.5
  for (int d = 0; d < 3; ++d) CHECK(out[D + d] == Approx(3.5).epsilon(1e-6));  // (1 + 6) * 0.5
  CHECK(out[D + 3] == Approx(7.0).epsilon(1e-6));
}

TEST_CASE("attention is causal: later tokens do not change earlier outputs", "[ref][attention]") {
  const int T = 7, Hq = 4, Hkv = 2, D = 16;
  auto in = random_inputs(T, Hq, Hkv, D, 200);
  auto base = prefill1(in, T, Hq, Hkv, D);
  auto changed = in;
  const int t0 = 4;  // perturb token 4's key, value and query
  for (int i = t0 * Hkv * D; i < (t0 + 1) * Hkv * D; ++i) {
    changed.k[i] += 0.5f;
    changed.v[i] -= 1.f;
  }
  for (int i = t0 * Hq * D; i < (t0 + 1) * Hq * D; ++i) changed.q[i] *= -1.f;
  auto out = prefill1(changed, T, Hq, Hkv, D);
  const int row = Hq * D;
  CHECK(slice(out, 0, t0 * row) == slice(base, 0, t0 * row));
  for (int t = t0; t < T; ++t) {
    INFO("token " << t);
    CHECK(slice(out, t * row, (t + 1) * row) != slice(base, t * row, (t + 1) * row));
  }
}

TEST_CASE("attention GQA: q head h reads kv head h / (Hq / Hkv)", "[ref][attention]") {
  // Hq = 4, Hkv = 2: heads 0,1 read kv head 0, heads 2,3 read kv head 1. Values are constant per
  // kv head (10 and 20 + d), so every output is exactly that value times sigmoid(gate) whatever
  // the softmax weights are.
  const int T = 3, Hq = 4, Hkv = 2, D = 2;
  auto in = random_inputs(T, Hq, Hkv, D, 300);
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < D; ++d) {
      in.v[(t * Hkv + 0) * D + d] = 10.f;
      in.v[(t * Hkv + 1) * D + d] = 20.f + d;
    }
  auto out = prefill1(in, T, Hq, Hkv, D);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < Hq; ++h)
      for (int d = 0; d < D; ++d) {
        const double expect = (h < 2 ? 10.0 : 20.0 + d) * sigmoid_d(in.gate[(t * Hq + h) * D + d]);
        INFO("t " << t << " head " << h << " d " << d);
        CHECK(out[(t * Hq + h) * D + d] == Approx(expect).epsilon(1e-5));
      }
}

TEST_CASE("attention matches a double-precision evaluation", "[ref][attention]") {
  const int Hq = GENERATE(2, 6), Hkv = 2, D = 64;
  const int64_t T = 33;
  auto in = random_inputs(T, Hq, Hkv, D, 400 + Hq);
  auto out = prefill1(in, T, Hq, Hkv, D);
  auto ref = naive(in, T, Hq, Hkv, D);
  CAPTURE(Hq);
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("index " << i);
    CHECK(out[i] == Approx(ref[i]).epsilon(1e-4).margin(1e-5));
  }
}

TEST_CASE("attention varlen: packed sequences equal separate calls", "[ref][attention]") {
  const int Hq = 4, Hkv = 1, D = 8;
  const int32_t cu[4] = {0, 5, 5, 12};  // lengths 5, 0 (empty), 7
  const int64_t T = 12;
  auto in = random_inputs(T, Hq, Hkv, D, 500);
  std::vector<float> out(T * Hq * D);
  attention_prefill(in.q.data(), in.k.data(), in.v.data(), in.gate.data(), cu, nullptr, out.data(), T, 3, Hq, Hkv, D);
  for (int s : {0, 2}) {
    const int64_t b = cu[s], e = cu[s + 1];
    Inputs part{slice(in.q, b * Hq * D, e * Hq * D), slice(in.k, b * Hkv * D, e * Hkv * D),
                slice(in.v, b * Hkv * D, e * Hkv * D), slice(in.gate, b * Hq * D, e * Hq * D)};
    INFO("sequence " << s);
    CHECK(prefill1(part, e - b, Hq, Hkv, D) == slice(out, b * Hq * D, e * Hq * D));
  }
}

TEST_CASE("attention prefill with history equals one prefill", "[ref][attention]") {
  const int Hq = 4, Hkv = 2, D = 32;
  const int64_t T = 11;
  const int64_t split = GENERATE(1, 4, 10);
  CAPTURE(split);
  auto in = random_inputs(T, Hq, Hkv, D, 600);
  auto full = prefill1(in, T, Hq, Hkv, D);

  // First part: a prefill without history, then its keys/values go into the cache.
  KvCache cache(Hkv, D, T);
  cache.append(in.k.data(), in.v.data(), split);
  // Second part with the first part as history.
  const int64_t n = T - split;
  const KvView hist = cache.view();
  const int32_t cu[2] = {0, static_cast<int32_t>(n)};
  std::vector<float> out(n * Hq * D);
  attention_prefill(in.q.data() + split * Hq * D, in.k.data() + split * Hkv * D, in.v.data() + split * Hkv * D,
                    in.gate.data() + split * Hq * D, cu, &hist, out.data(), n, 1, Hq, Hkv, D);
  CHECK(out == slice(full, split * Hq * D, T * Hq * D));
}

TEST_CASE("attention decode of token n equals the last row of a prefill of n + 1 tokens", "[ref][attention]") {
  const int Hq = 6, Hkv = 2, D = 16;
  // Three sequences decoded together, with caches of 0, 5 and 9 tokens.
  const int64_t lens[3] = {0, 5, 9};
  std::vector<Inputs> seqs;
  std::vector<KvCache> caches;
  Inputs step;  // the batch's new tokens, [B, ...]
  std::vector<float> expect;
  for (int b = 0; b < 3; ++b) {
    const int64_t n = lens[b];
    seqs.push_back(random_inputs(n + 1, Hq, Hkv, D, 700 + 10 * b));
    const Inputs& s = seqs.back();
    caches.emplace_back(Hkv, D, n + 1);
    if (n > 0) caches.back().append(s.k.data(), s.v.data(), n);
    auto last = [&](const std::vector<float>& a, int H) { return slice(a, n * H * D, (n + 1) * H * D); };
    for (auto [dst, src, H] : {std::tuple{&step.q, &s.q, Hq}, std::tuple{&step.k, &s.k, Hkv},
                               std::tuple{&step.v, &s.v, Hkv}, std::tuple{&step.gate, &s.gate, Hq}}) {
      auto part = last(*src, H);
      dst->insert(dst->end(), part.begin(), part.end());
    }
    auto full = prefill1(s, n + 1, Hq, Hkv, D);
    auto row = last(full, Hq);
    expect.insert(expect.end(), row.begin(), row.end());
  }
  const KvView views[3] = {caches[0].view(), caches[1].view(), caches[2].view()};
  std::vector<float> out(3 * Hq * D);
  attention_decode(step.q.data(), step.k.data(), step.v.data(), step.gate.data(), views, out.data(), 3, Hq, Hkv, D);
  CHECK(out == expect);
}

TEST_CASE("attention softmax is stable with large logits", "[ref][attention]") {
  // D = 1: logits q*k = 1e6, -1e6, 999000: exp without the max shift would overflow.
  Inputs in;
  in.q = {0, 0, 1000};
  in.k = {1000, -1000, 999};
  in.v = {3, 5, 7};
  in.gate = {0, 0, 0};
  auto out = prefill1(in, 3, 1, 1, 1);
  for (float x : out) CHECK(std::isfinite(x));
  CHECK(out[2] == Approx(1.5).epsilon(1e-6));  // all weight on key 0: 3 * sigmoid(0)
  // Same through decode with a very negative shift everywhere.
  KvCache cache(1, 1, 2);
  cache.append(in.k.data(), in.v.data(), 2);
  const KvView view = cache.view();
  float o = 0;
  const float q = -1000, k = 999, v = 7, g = 0;
  attention_decode(&q, &k, &v, &g, &view, &o, 1, 1, 1, 1);
  CHECK(std::isfinite(o));
  CHECK(o == Approx(2.5).epsilon(1e-6));  // logits -1e6, 1e6, -999000: all on key 1 (v = 5)
}

TEST_CASE("attention padding rows read nothing and write zeros", "[ref][attention]") {
  const int Hq = 2, Hkv = 1, D = 4;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto in = random_inputs(3, Hq, Hkv, D, 800);
  SECTION("decode") {
    // Row 0 is padding with a garbage (null) cache; row 1 is real.
    KvCache real(Hkv, D, 4);
    real.append(in.k.data(), in.v.data(), 2);
    const KvView views[2] = {KvView{nullptr, nullptr, -1}, real.view()};
    std::vector<float> out(2 * Hq * D, nan);
    attention_decode(in.q.data(), in.k.data(), in.v.data(), in.gate.data(), views, out.data(), 2, Hq, Hkv, D);
    for (int i = 0; i < Hq * D; ++i) CHECK(out[i] == 0.f);
    for (int i = Hq * D; i < 2 * Hq * D; ++i) CHECK(std::isfinite(out[i]));
  }
  SECTION("prefill") {
    const int32_t cu[3] = {0, 2, 3};
    const KvView hist[2] = {KvView{}, KvView{nullptr, nullptr, -1}};
    std::vector<float> out(3 * Hq * D, nan);
    attention_prefill(in.q.data(), in.k.data(), in.v.data(), in.gate.data(), cu, hist, out.data(), 3, 2, Hq, Hkv, D);
    for (int i = 0; i < 2 * Hq * D; ++i) CHECK(std::isfinite(out[i]));
    for (int i = 2 * Hq * D; i < 3 * Hq * D; ++i) CHECK(out[i] == 0.f);
  }
}

TEST_CASE("attention Store::bf16 rounds the f32 result once", "[ref][attention]") {
  const int64_t T = 5;
  const int Hq = 2, Hkv = 2, D = 8;
  auto in = random_inputs(T, Hq, Hkv, D, 900);
  auto f = prefill1(in, T, Hq, Hkv, D, Store::f32);
  auto b = prefill1(in, T, Hq, Hkv, D, Store::bf16);
  int differ = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    CHECK(b[i] == round_bf16(f[i]));
    differ += b[i] != f[i];
  }
  CHECK(differ > 0);
}

TEST_CASE("split_q_gate: per head D query features then D gate features", "[ref][attention]") {
  const int T = 2, Hq = 3, D = 2;
  std::vector<float> qg(T * Hq * 2 * D);
  for (size_t i = 0; i < qg.size(); ++i) qg[i] = static_cast<float>(i);
  std::vector<float> q(T * Hq * D), g(T * Hq * D);
  split_q_gate(qg.data(), q.data(), g.data(), T, Hq, D);
  // Row t, head h starts at (t * Hq + h) * 4: {q0, q1, g0, g1}.
  CHECK(q == std::vector<float>{0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21});
  CHECK(g == std::vector<float>{2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23});
}

TEST_CASE("attention rejects bad arguments", "[ref][attention]") {
  auto in = random_inputs(2, 4, 2, 4, 1000);
  std::vector<float> out(2 * 4 * 4);
  const int32_t cu[2] = {0, 2};
  const int32_t cu_bad_end[2] = {0, 3};
  const int32_t cu_decreasing[3] = {0, 2, 1};
  auto prefill = [&](const int32_t* c, int64_t T, int S, int Hq, int Hkv, int D) {
    attention_prefill(in.q.data(), in.k.data(), in.v.data(), in.gate.data(), c, nullptr, out.data(), T, S, Hq, Hkv, D);
  };
  CHECK_THROWS_AS(prefill(cu, 2, 1, 3, 2, 4), std::invalid_argument);  // Hq % Hkv != 0
  CHECK_THROWS_AS(prefill(cu, 2, 1, 4, 0, 4), std::invalid_argument);
  CHECK_THROWS_AS(prefill(cu, 2, 1, 4, 2, 0), std::invalid_argument);
  CHECK_THROWS_AS(prefill(cu, 0, 1, 4, 2, 4), std::invalid_argument);
  CHECK_THROWS_AS(prefill(cu_bad_end, 2, 1, 4, 2, 4), std::invalid_argument);
  CHECK_THROWS_AS(prefill(cu_decreasing, 2, 2, 4, 2, 4), std::invalid_argument);
  const KvView views[1] = {KvView{nullptr, nullptr, 3}};  // len > 0 with null pointers
  CHECK_THROWS_AS(
      attention_decode(in.q.data(), in.k.data(), in.v.data(), in.gate.data(), views, out.data(), 1, 4, 2, 4),
      std::invalid_argument);
  CHECK_THROWS_AS(
      attention_decode(in.q.data(), in.k.data(), in.v.data(), in.gate.data(), views, out.data(), 0, 4, 2, 4),
      std::invalid_argument);
  KvCache cache(2, 4, 1);
  CHECK_THROWS_AS(cache.append(in.k.data(), in.v.data(), 2), std::invalid_argument);  // > capacity
  CHECK_THROWS_AS(KvCache(0, 4, 1), std::invalid_argument);
}
