// GPU tests of the full-attention kernels over an f32 KV cache (the parity mode; the bf16 cache:
// test_attention.cpp, shared pieces: attention_fixture.h): attn_prep stores k and v unrounded
// (q, gate and every cache byte checked, padding rows write zeros and touch no cache, including
// rows past max_context), decode (no split and split-K) and varlen prefill with history against
// the CPU attention reference fed the GPU's own q / gate / cache, and the launchers' checks.
// Inputs are unrounded f32 values, so a bf16 rounding anywhere on the way fails by far (2^-9).
// Tolerances (f32 values; bf16 outputs keep test_attention.cpp's, rounding dominates there):
//   q and cached k: 2^-19 |r| + 1e-6. The kernel's warp-tree sum of squares differs from the
//     reference's sequential one (~sqrt(D) ulp in the sum, < 2^-20 relative in y); cos/sin are
//     computed in double and rounded while the reference's f32 std::cos/std::sin miss by 1 ulp
//     for ~1% of (position, frequency) pairs (glibc, the test's positions), which after the
//     rotate-half cancellation is < 2 * 3.5 * 2^-24 ~ 4e-7 absolute; inv_freq matches bit for bit
//     for both (rotary, theta) pairs. A CPU emulation of the kernel's order over 30,000 heads
//     peaks at 0.35 of this tolerance.
//   v and gate: exact bytes (copies).
//   attention outputs: 1e-5 |r| + 2e-6 (the bf16 cache's f32 outputs: 1e-4 |r| + 2e-6). Both
//     sides sum q.k and sum_j p_j v_j in different orders (lane chunks, xor trees, online-softmax
//     rescales, split merges; CUDA expf within 2 ulp), an error of ~20 ulp of
//     sum_j p_j |v_j| * sigmoid(gate) <= 1 here; the absolute floor comes from the cancellation in
//     sum_j p_j v_j (|v| <= 1), so it does not shrink with the cache dtype. A CPU emulation of
//     both kernels (contexts 1..4096, D 32 and 256, every split count, expf off by up to 2 ulp)
//     peaks at 0.33 of this tolerance.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/ref/norm_ref.h"
#include "kernels/ref/rope_ref.h"
#include "tests/gpu/attention_fixture.h"
#include "tests/support/catch.h"

using namespace sg;
using namespace sg::test::attn;

namespace {

const Tol kQkF32{std::ldexp(1.0, -19), 1e-6};
const Tol kQkBf16{std::ldexp(1.0, -7), 1e-5};  // 1 ulp, as test_attention.cpp

Tol out_tol(DType t) { return t == DType::bf16 ? Tol{std::ldexp(1.0, -6), 1e-5} : Tol{1e-5, 2e-6}; }

bool within(float got, float want, Tol t) { return std::fabs(got - want) <= t.rel * std::fabs(want) + t.abs; }

// Elements of the non-live rows of `got` ([T, row]) that are not exactly zero.
size_t nonzero_padding(const std::vector<float>& got, const Batch& b, size_t row) {
  size_t n = 0;
  for (int t = 0; t < b.T; ++t) {
    if (b.live(t)) continue;
    for (size_t i = t * row; i < (t + 1) * row; ++i) n += got[i] != 0.f;
  }
  return n;
}

}  // namespace

TEST_CASE(
    "attention prep f32 cache: k and v stored unrounded, q and gate match, padding rows write zeros and touch no cache",
    "[gpu][attention]") {
  for (const Shape& sh : kShapes) {
    for (DType act : {DType::f32, DType::bf16}) {
      CAPTURE(sh.Hq, sh.Hkv, sh.D, sh.rot, dtype_name(act));
      // As the bf16 test, plus a sequence running past max_context (its positions 1100, 1101 are padding).
      const std::vector<Seq> seqs = {{0, 5, 3}, {17, 3, 0}, {1020, 4, 4}, {7, 0, 1}, {2, 3, -1}, {1098, 4, 2}};
      const Batch b = make_batch(seqs, 3);
      const uint64_t seed = 7100 + sh.D + sh.Hq;
      INFO("seed " << seed);
      const Inputs in = make_inputs(sh, b.T, seed, act);
      DevMeta dm(b);
      Cache c(sh, 5, 1100, 0xA5, DType::f32);
      PrepOut po = run_prep(sh, b, dm, in, c);
      const auto live = [&](int t) { return b.live(t) && b.positions[t] < c.max_ctx; };

      // Reference: q rounded like the kernel's q dtype, k unrounded (the f32 cache).
      const size_t qrow = static_cast<size_t>(sh.Hq) * sh.D, krow = static_cast<size_t>(sh.Hkv) * sh.D;
      std::vector<float> q(b.T * qrow), gate(b.T * qrow), k = in.k;  // [T, Hq, D], [T, Hq, D], [T, Hkv, D]
      std::vector<int64_t> pos64(b.positions.begin(), b.positions.end());
      ref::split_q_gate(in.qg.data(), q.data(), gate.data(), b.T, sh.Hq, sh.D);
      ref::rmsnorm(q.data(), in.qn.data(), q.data(), static_cast<int64_t>(b.T) * sh.Hq, sh.D, kEps);
      const ref::Store qst = act == DType::bf16 ? ref::Store::bf16 : ref::Store::f32;
      ref::rope(q.data(), pos64.data(), b.T, sh.Hq, sh.D, sh.rot, sh.theta, qst);
      ref::rmsnorm(k.data(), in.kn.data(), k.data(), static_cast<int64_t>(b.T) * sh.Hkv, sh.D, kEps);
      ref::rope(k.data(), pos64.data(), b.T, sh.Hkv, sh.D, sh.rot, sh.theta, ref::Store::f32);
      for (int t = 0; t < b.T; ++t) {
        if (live(t)) continue;
        std::fill(q.begin() + t * qrow, q.begin() + (t + 1) * qrow, 0.f);
        std::fill(gate.begin() + t * qrow, gate.begin() + (t + 1) * qrow, 0.f);
      }
      // q within tolerance (padding rows exactly zero), gate exact.
      const auto gq = po.q.download_f32(act);
      const Tol qtol = act == DType::bf16 ? kQkBf16 : kQkF32;
      size_t bad_q = 0, pad_q = 0;
      for (int t = 0; t < b.T; ++t) {
        for (size_t i = t * qrow; i < (t + 1) * qrow; ++i) {
          bad_q += !within(gq[i], q[i], qtol);
          pad_q += !live(t) && gq[i] != 0.f;
        }
      }
      CHECK(bad_q == 0);
      CHECK(pad_q == 0);
      CHECK(test::byte_diff(po.gate.download(), test::to_bytes(gate, act), act) == "");

      // Cache: the live tokens' (slot, pos) rows hold the reference's f32 k (RoPE tolerance) and v
      // (exact); every other byte, padding rows' included, is poison.
      const auto kb = c.k.download(), vb = c.v.download();
      const auto kf = test::from_bytes(kb, DType::f32), vf = test::from_bytes(vb, DType::f32);
      std::vector<uint8_t> written(c.elems, 0);
      size_t bad_k = 0, bad_v = 0, stray = 0;
      for (int t = 0; t < b.T; ++t) {
        if (!live(t)) continue;
        for (size_t e = 0; e < krow; ++e) {
          const size_t ci = c.index(sh, b.slot(t), b.positions[t], 0, 0) + e;
          written[ci] = 1;
          bad_k += !within(kf[ci], k[t * krow + e], kQkF32);
          bad_v += !(vf[ci] == in.v[t * krow + e]);
        }
      }
      for (size_t i = 0; i < c.elems; ++i) {
        if (written[i]) continue;
        for (size_t j = 4 * i; j < 4 * i + 4; ++j) stray += kb[j] != 0xA5 || vb[j] != 0xA5;
      }
      CHECK(bad_k == 0);
      CHECK(bad_v == 0);
      CHECK(stray == 0);
    }
  }
}

TEST_CASE(
    "attention decode f32 cache: no split and split-K match the reference at f32 tolerance, padding rows are zero",
    "[gpu][attention]") {
  for (const Shape& sh : kShapes) {
    for (DType ot : {DType::f32, DType::bf16}) {
      CAPTURE(sh.Hq, sh.Hkv, sh.D, dtype_name(ot));
      // Contexts 1, 17, 1024, 4096 (the new token at position ctx-1), a padding sequence, a padding row.
      const std::vector<Seq> seqs = {{0, 1, 2}, {16, 1, 0}, {1023, 1, 5}, {4095, 1, 3}, {9, 1, -1}};
      const Batch b = make_batch(seqs, 1);
      const uint64_t seed = 8100 + sh.D + sh.Hq;
      INFO("seed " << seed);
      const Inputs in = make_inputs(sh, b.T, seed, DType::f32);
      DevMeta dm(b);
      Cache c(sh, 6, 4100, 0xFF, DType::f32);  // poison = f32 NaN: a read outside the context shows
      fill_history(sh, c, seqs, seed + 10);
      PrepOut po = run_prep(sh, b, dm, in, c);
      const auto q = po.q.download_f32(DType::f32), gate = po.gate.download_f32(DType::f32);  // [T, Hq, D]
      const auto kc = c.k.download_f32(DType::f32), vc = c.v.download_f32(DType::f32);        // [6, 4100, Hkv, D]
      const auto rows = all_rows(b.T);
      const ref::Store st = ot == DType::bf16 ? ref::Store::bf16 : ref::Store::f32;
      const auto want = ref_attention(sh, b, q, gate, kc, vc, c, rows, st);
      const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
      const int picked = attention_decode_pick_splits(b.T, sh.Hq, sh.Hkv, c.max_ctx, 132);
      for (int splits : {1, 2, 3, 8, 32, picked}) {
        CAPTURE(splits);
        test::DevBuf out(b.T * row * dtype_size(ot));  // [T, Hq, D], poisoned
        test::DevBuf ws(std::max<size_t>(4, attention_decode_workspace_bytes(b.T, sh.Hq, sh.D, splits)));
        AttentionParams p = attn_params(sh, b, dm, po, c, out, ot);
        p.splits = splits;
        p.workspace = ws.as<float>();
        check(attention_decode(p, nullptr));
        check(cudaDeviceSynchronize());
        const auto got = out.download_f32(ot);
        CHECK_FALSE(has_nan(got));
        CHECK(nonzero_padding(got, b, row) == 0);
        std::string first;
        const size_t bad = count_bad(got, want, rows, row, out_tol(ot), first);
        INFO(first);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE(
    "attention prefill f32 cache: varlen with history, zero-length sequences and padding match the reference and "
    "decode",
    "[gpu][attention]") {
  const std::vector<PrefillCase>& cases = prefill_cases();
  for (const Shape& sh : kShapes) {
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const PrefillCase& cs = cases[ci];
      if (ci == 2 && sh.Hq != 4 && sh.Hq != 16) continue;  // keep the CPU reference time bounded
      CAPTURE(sh.Hq, sh.Hkv, sh.D, ci);
      const Batch b = make_batch(cs.seqs, cs.pad);
      const uint64_t seed = 9100 + sh.D + sh.Hq + ci;
      INFO("seed " << seed);
      const Inputs in = make_inputs(sh, b.T, seed, DType::f32);
      DevMeta dm(b);
      Cache c(sh, 5, cs.max_ctx, 0xFF, DType::f32);
      fill_history(sh, c, cs.seqs, seed + 10);
      PrepOut po = run_prep(sh, b, dm, in, c);
      const auto q = po.q.download_f32(DType::f32), gate = po.gate.download_f32(DType::f32);  // [T, Hq, D]
      const auto kc = c.k.download_f32(DType::f32), vc = c.v.download_f32(DType::f32);        // [5, max_ctx, Hkv, D]
      const std::vector<int> rows = cs.rows(b.T);
      const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
      // f32 outputs only: the parity mode's, and the output store does not depend on the cache.
      const DType ot = DType::f32;
      const auto want = ref_attention(sh, b, q, gate, kc, vc, c, rows, ref::Store::f32);
      test::DevBuf out(b.T * row * dtype_size(ot));  // [T, Hq, D], poisoned
      const auto got =
          check_prefill_then_decode(attn_params(sh, b, dm, po, c, out, ot), out, b.T, row, ot, want, rows, out_tol(ot));
      CHECK(nonzero_padding(got, b, row) == 0);
    }
  }
}

TEST_CASE("attention launchers: cache dtypes other than bf16 and f32 and misaligned caches are rejected",
          "[gpu][attention]") {
  CHECK(attention_supports(16, 4, 256));
  CHECK(attention_supports(16, 4, 256, DType::f32));
  CHECK_FALSE(attention_supports(16, 4, 256, DType::f16));
  test::DevBuf buf(4096);
  const Shape sh{4, 2, 32, 16, 1e4};
  const Batch b = make_batch({{0, 1, 0}}, 0);
  DevMeta dm(b);
  AttentionParams p;
  p.q = p.gate = p.k_cache = p.v_cache = buf.data();
  p.out = buf.data();
  p.meta = dm.meta();
  p.T = b.T;
  p.Hq = sh.Hq;
  p.Hkv = sh.Hkv;
  p.D = sh.D;
  p.max_context = 4;
  for (DType t : {DType::f16, DType::i32}) {
    p.cache_dtype = t;
    CHECK(attention_decode(p, nullptr) == cudaErrorInvalidValue);
    CHECK(attention_prefill(p, nullptr) == cudaErrorInvalidValue);
  }
  p.cache_dtype = DType::f32;
  p.k_cache = static_cast<const char*>(buf.data()) + 4;  // f32-aligned, not 16-byte aligned
  CHECK(attention_decode(p, nullptr) == cudaErrorInvalidValue);
  CHECK(attention_prefill(p, nullptr) == cudaErrorInvalidValue);

  AttnPrepParams pp;
  pp.qg = pp.k = pp.v = pp.q_norm = pp.k_norm = buf.data();
  pp.q = pp.gate = pp.k_cache = pp.v_cache = buf.data();
  pp.meta = dm.meta();
  pp.T = b.T;
  pp.Hq = sh.Hq;
  pp.Hkv = sh.Hkv;
  pp.D = sh.D;
  pp.rotary_dim = sh.rot;
  pp.max_context = 4;
  pp.cache_dtype = DType::f16;
  CHECK(attn_prep(pp, nullptr) == cudaErrorInvalidValue);
  check(cudaDeviceSynchronize());  // nothing was launched
}
