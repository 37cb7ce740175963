// GPU tests of the generic attention kernel (kernels/attention_generic.cu: every head size D in
// 1..256 without a tuned kernel), over both KV cache dtypes (shared pieces: attention_fixture.h):
// - attn_prep at these head sizes and partial rotary dims (the Hugging Face fixtures' D = 24 with
//   rotary 6 and D = 16 with rotary 8 and 4) against the CPU references, no stray cache write;
// - decode (no split, split-K with 2, 3, 8, 32 and the picked count) against the CPU attention
//   reference fed the GPU's own q / gate / cache, padding rows exactly zero;
// - varlen prefill (history, zero-length sequences, padding) against the reference, and the
//   decode kernel (one and three splits) on the same rows;
// - prefill n then decode m (split-K) against prefill n + m, and the caches byte-equal.
// Shapes: D = 16 (group 3 and 2), 24 (group 2), 80 (three features per lane) and 200 (a partial
// last feature group). Tolerances are those of the tuned kernels' tests (test_attention.cpp for
// the bf16 cache, test_attention_f32_cache.cpp for the f32 cache, derivations there): the generic
// kernel sums in another order (a warp per key, an xor tree over D, 4 warps per block), within
// the same bounds.
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

// (Hq, Hkv, D, rotary, theta); the inv_freq of every (rotary, theta) pair here is bit-identical
// between the kernel (pow in double) and the reference (powf), checked on the host.
const Shape kGenericShapes[] = {
    {6, 2, 16, 8, 1e7},    // h48-tied-hv3x-dk32-dv16
    {2, 1, 24, 6, 1e6},    // h40-attn-first-v500
    {4, 2, 16, 4, 1e4},    // h72-hv2x-dk16-dv24
    {4, 4, 80, 20, 1e4},   // three features per lane
    {2, 2, 200, 64, 1e7},  // seven features per lane, the last group partial
};

// Attention output tolerance by cache and output dtype (see the top of the file).
Tol out_tol(DType cache, DType out) {
  if (out == DType::bf16) return Tol{std::ldexp(1.0, -6), 1e-5};
  return cache == DType::f32 ? Tol{1e-5, 2e-6} : Tol{1e-4, 2e-6};
}

// Elements of the non-live rows of `got` ([T, row]) that are not exactly zero.
size_t nonzero_padding(const std::vector<float>& got, const Batch& b, size_t row) {
  size_t n = 0;
  for (int t = 0; t < b.T; ++t) {
    if (b.live(t)) continue;
    for (size_t i = t * row; i < (t + 1) * row; ++i) n += got[i] != 0.f;
  }
  return n;
}

ref::Store store_of(DType t) { return t == DType::bf16 ? ref::Store::bf16 : ref::Store::f32; }

// Runs decode with `splits` (workspace sized for it) into a fresh poisoned buffer of `ot`.
std::vector<float> run_decode(AttentionParams p, int splits, DType ot, size_t elems) {
  test::DevBuf out(elems * dtype_size(ot));  // [T, Hq, D], poisoned
  test::DevBuf ws(std::max<size_t>(4, attention_decode_workspace_bytes(p.T, p.Hq, p.D, splits)));
  p.out = out.data();
  p.out_dtype = ot;
  p.splits = splits;
  p.workspace = ws.as<float>();
  check(attention_decode(p, nullptr));
  check(cudaDeviceSynchronize());
  return out.download_f32(ot);
}

}  // namespace

TEST_CASE("attention generic head sizes: prep with partial rotary matches the reference, no stray cache write",
          "[gpu][attention][generic]") {
  for (const Shape& sh : kGenericShapes) {
    for (DType dt : {DType::bf16, DType::f32}) {  // activations and cache alike
      CAPTURE(sh.Hq, sh.Hkv, sh.D, sh.rot, dtype_name(dt));
      REQUIRE_FALSE(attention_tuned_head_dim(sh.D));
      const std::vector<Seq> seqs = {{0, 5, 3}, {17, 3, 0}, {1020, 4, 4}, {7, 0, 1}, {2, 3, -1}};
      const Batch b = make_batch(seqs, 3);
      const uint64_t seed = 7200 + sh.D + sh.Hq;
      INFO("seed " << seed);
      const Inputs in = make_inputs(sh, b.T, seed, dt);
      DevMeta dm(b);
      Cache c(sh, 5, 1100, 0xA5, dt);
      PrepOut po = run_prep(sh, b, dm, in, c);

      const size_t qrow = static_cast<size_t>(sh.Hq) * sh.D, krow = static_cast<size_t>(sh.Hkv) * sh.D;
      std::vector<float> q(b.T * qrow), gate(b.T * qrow), k = in.k;  // [T, Hq, D], [T, Hq, D], [T, Hkv, D]
      std::vector<int64_t> pos64(b.positions.begin(), b.positions.end());
      ref::split_q_gate(in.qg.data(), q.data(), gate.data(), b.T, sh.Hq, sh.D);
      ref::rmsnorm(q.data(), in.qn.data(), q.data(), static_cast<int64_t>(b.T) * sh.Hq, sh.D, kEps);
      ref::rope(q.data(), pos64.data(), b.T, sh.Hq, sh.D, sh.rot, sh.theta, store_of(dt));
      ref::rmsnorm(k.data(), in.kn.data(), k.data(), static_cast<int64_t>(b.T) * sh.Hkv, sh.D, kEps);
      ref::rope(k.data(), pos64.data(), b.T, sh.Hkv, sh.D, sh.rot, sh.theta, store_of(dt));
      for (int t = 0; t < b.T; ++t) {
        if (b.live(t)) continue;
        std::fill(q.begin() + t * qrow, q.begin() + (t + 1) * qrow, 0.f);
        std::fill(gate.begin() + t * qrow, gate.begin() + (t + 1) * qrow, 0.f);
      }
      // q and k: 1 ulp + 1e-5 (bf16) or 2^-19 + 1e-6 (f32), as the tuned tests; gate and v exact.
      const Tol qk = dt == DType::bf16 ? Tol{std::ldexp(1.0, -7), 1e-5} : Tol{std::ldexp(1.0, -19), 1e-6};
      const auto within = [&](float got, float want) {
        return std::fabs(got - want) <= qk.rel * std::fabs(want) + qk.abs;
      };
      const auto gq = po.q.download_f32(dt);
      size_t bad_q = 0;
      for (size_t i = 0; i < q.size(); ++i) bad_q += !within(gq[i], q[i]);
      CHECK(bad_q == 0);
      CHECK(test::byte_diff(po.gate.download(), test::to_bytes(gate, dt), dt) == "");

      const auto kb = c.k.download(), vb = c.v.download();
      const auto kf = test::from_bytes(kb, dt), vf = test::from_bytes(vb, dt);  // [5, 1100, Hkv, D]
      const size_t es = dtype_size(dt);
      std::vector<uint8_t> written(c.elems, 0);
      size_t bad_k = 0, bad_v = 0, stray = 0;
      for (int t = 0; t < b.T; ++t) {
        if (!b.live(t)) continue;
        for (size_t e = 0; e < krow; ++e) {
          const size_t ci = c.index(sh, b.slot(t), b.positions[t], 0, 0) + e;
          written[ci] = 1;
          bad_k += !within(kf[ci], k[t * krow + e]);
          bad_v += !(vf[ci] == in.v[t * krow + e]);
        }
      }
      for (size_t i = 0; i < c.elems; ++i) {
        if (written[i]) continue;
        for (size_t j = es * i; j < es * (i + 1); ++j) stray += kb[j] != 0xA5 || vb[j] != 0xA5;
      }
      CHECK(bad_k == 0);
      CHECK(bad_v == 0);
      CHECK(stray == 0);
    }
  }
}

TEST_CASE("attention generic head sizes: decode, no split and split-K, matches the reference, padding rows are zero",
          "[gpu][attention][generic]") {
  for (const Shape& sh : kGenericShapes) {
    for (DType cache : {DType::bf16, DType::f32}) {
      CAPTURE(sh.Hq, sh.Hkv, sh.D, dtype_name(cache));
      // Contexts 1, 17, 1024, 4096 (the new token at position ctx-1), a padding sequence, a padding row.
      const std::vector<Seq> seqs = {{0, 1, 2}, {16, 1, 0}, {1023, 1, 5}, {4095, 1, 3}, {9, 1, -1}};
      const Batch b = make_batch(seqs, 1);
      const uint64_t seed = 8200 + sh.D + sh.Hq;
      INFO("seed " << seed);
      const Inputs in = make_inputs(sh, b.T, seed, cache);
      DevMeta dm(b);
      Cache c(sh, 6, 4100, 0xFF, cache);  // poison = NaN in both dtypes: a read outside the context shows
      fill_history(sh, c, seqs, seed + 10);
      PrepOut po = run_prep(sh, b, dm, in, c);
      const auto q = po.q.download_f32(cache), gate = po.gate.download_f32(cache);  // [T, Hq, D]
      const auto kc = c.k.download_f32(cache), vc = c.v.download_f32(cache);        // [6, 4100, Hkv, D]
      const auto rows = all_rows(b.T);
      const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
      test::DevBuf unused(4);
      const AttentionParams p = attn_params(sh, b, dm, po, c, unused, cache);
      const int picked = attention_decode_pick_splits(b.T, sh.Hq, sh.Hkv, c.max_ctx, 132);
      for (DType ot : {DType::f32, DType::bf16}) {
        CAPTURE(dtype_name(ot));
        const auto want = ref_attention(sh, b, q, gate, kc, vc, c, rows, store_of(ot));
        for (int splits : {1, 2, 3, 8, 32, picked}) {
          CAPTURE(splits);
          const auto got = run_decode(p, splits, ot, b.T * row);
          CHECK_FALSE(has_nan(got));
          CHECK(nonzero_padding(got, b, row) == 0);
          std::string first;
          const size_t bad = count_bad(got, want, rows, row, out_tol(cache, ot), first);
          INFO(first);
          CHECK(bad == 0);
        }
      }
    }
  }
}

TEST_CASE(
    "attention generic head sizes: prefill with history, zero-length sequences and padding matches the reference and "
    "decode",
    "[gpu][attention][generic]") {
  const std::vector<PrefillCase>& cases = prefill_cases();
  for (const Shape& sh : kGenericShapes) {
    for (DType cache : {DType::bf16, DType::f32}) {
      for (size_t ci = 0; ci < cases.size(); ++ci) {
        const PrefillCase& cs = cases[ci];
        if (ci == 2 && sh.D > 24) continue;  // keep the CPU reference time bounded
        CAPTURE(sh.Hq, sh.Hkv, sh.D, dtype_name(cache), ci);
        const Batch b = make_batch(cs.seqs, cs.pad);
        const uint64_t seed = 9200 + sh.D + sh.Hq + ci;
        INFO("seed " << seed);
        const Inputs in = make_inputs(sh, b.T, seed, cache);
        DevMeta dm(b);
        Cache c(sh, 5, cs.max_ctx, 0xFF, cache);
        fill_history(sh, c, cs.seqs, seed + 10);
        PrepOut po = run_prep(sh, b, dm, in, c);
        const auto q = po.q.download_f32(cache), gate = po.gate.download_f32(cache);  // [T, Hq, D]
        const auto kc = c.k.download_f32(cache), vc = c.v.download_f32(cache);        // [5, max_ctx, Hkv, D]
        const std::vector<int> rows = cs.rows(b.T);
        const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
        for (DType ot : {DType::f32, DType::bf16}) {
          CAPTURE(dtype_name(ot));
          const auto want = ref_attention(sh, b, q, gate, kc, vc, c, rows, store_of(ot));
          test::DevBuf out(b.T * row * dtype_size(ot));  // [T, Hq, D], poisoned
          AttentionParams p = attn_params(sh, b, dm, po, c, out, ot);
          check(attention_prefill(p, nullptr));
          check(cudaDeviceSynchronize());
          const auto got = out.download_f32(ot);
          CHECK_FALSE(has_nan(got));
          CHECK(nonzero_padding(got, b, row) == 0);
          std::string first;
          size_t bad = count_bad(got, want, rows, row, out_tol(cache, ot), first);
          INFO("prefill: " << first);
          CHECK(bad == 0);
          // The decode kernel on the same rows (every token a row), without and with split-K.
          for (int splits : {1, 3}) {
            CAPTURE(splits);
            const auto got2 = run_decode(p, splits, ot, b.T * row);
            CHECK(nonzero_padding(got2, b, row) == 0);
            first.clear();
            bad = count_bad(got2, want, rows, row, out_tol(cache, ot), first);
            INFO("decode on prefill rows: " << first);
            CHECK(bad == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("attention generic head sizes: prefill n then decode m equals prefill n plus m",
          "[gpu][attention][generic]") {
  for (const Shape& sh : kGenericShapes) {
    for (DType dt : {DType::bf16, DType::f32}) {  // activations, cache and outputs alike
      CAPTURE(sh.Hq, sh.Hkv, sh.D, dtype_name(dt));
      const int n0 = 37, n1 = 1, m = 5;
      const uint64_t seed = 9600 + sh.D + sh.Hq;
      INFO("seed " << seed);
      const Tol tol = out_tol(dt, dt);
      // Full run: both sequences prefilled with n + m tokens in one batch.
      const Batch bf = make_batch({{0, n0 + m, 2}, {0, n1 + m, 0}}, 2);
      const Inputs inf = make_inputs(sh, bf.T, seed, dt);
      const size_t qg_row = static_cast<size_t>(sh.Hq) * 2 * sh.D, kv_row = static_cast<size_t>(sh.Hkv) * sh.D;
      const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
      DevMeta dmf(bf);
      Cache cf(sh, 3, 64, 0xFF, dt);
      PrepOut pof = run_prep(sh, bf, dmf, inf, cf);
      test::DevBuf outf(bf.T * row * dtype_size(dt));  // [T, Hq, D]
      AttentionParams pf = attn_params(sh, bf, dmf, pof, cf, outf, dt);
      check(attention_prefill(pf, nullptr));
      check(cudaDeviceSynchronize());
      const auto full = outf.download_f32(dt);
      const int start[2] = {0, n0 + m};  // token index of each sequence in the full batch

      // Rows `picks` (token indices of the full batch; -1: a junk row) of the full run's inputs.
      auto pick = [&](const std::vector<int>& picks) {
        Inputs in;
        in.qn = inf.qn;
        in.kn = inf.kn;
        in.act = dt;
        for (int t : picks) {
          const int src = t < 0 ? 0 : t;
          in.qg.insert(in.qg.end(), inf.qg.begin() + src * qg_row, inf.qg.begin() + (src + 1) * qg_row);
          in.k.insert(in.k.end(), inf.k.begin() + src * kv_row, inf.k.begin() + (src + 1) * kv_row);
          in.v.insert(in.v.end(), inf.v.begin() + src * kv_row, inf.v.begin() + (src + 1) * kv_row);
        }
        return in;
      };
      Cache cs(sh, 3, 64, 0xFF, dt);
      {
        const Batch b = make_batch({{0, n0, 2}, {0, n1, 0}}, 0);
        std::vector<int> picks;
        for (int i = 0; i < n0; ++i) picks.push_back(start[0] + i);
        for (int i = 0; i < n1; ++i) picks.push_back(start[1] + i);
        DevMeta dm(b);
        PrepOut po = run_prep(sh, b, dm, pick(picks), cs);
        test::DevBuf out(b.T * row * dtype_size(dt));
        AttentionParams p = attn_params(sh, b, dm, po, cs, out, dt);
        check(attention_prefill(p, nullptr));
        check(cudaDeviceSynchronize());
        const auto got = out.download_f32(dt);
        std::vector<float> want(got.size());
        for (size_t r = 0; r < picks.size(); ++r) {
          std::copy(full.begin() + picks[r] * row, full.begin() + (picks[r] + 1) * row, want.begin() + r * row);
        }
        std::string first;
        const size_t bad = count_bad(got, want, all_rows(b.T), row, tol, first);
        INFO("prefill part: " << first);
        CHECK(bad == 0);
      }
      for (int i = 0; i < m; ++i) {
        CAPTURE(i);
        // Decode batch: a padding row between the two sequences' rows; split-K over the context.
        Batch b;
        b.slots = {2, 0};
        b.positions = {n0 + i, 0, n1 + i};
        b.token_seq = {0, -1, 1};
        b.T = 3;
        const std::vector<int> picks = {start[0] + n0 + i, -1, start[1] + n1 + i};
        DevMeta dm(b);
        PrepOut po = run_prep(sh, b, dm, pick(picks), cs);
        test::DevBuf unused(4);
        const AttentionParams p = attn_params(sh, b, dm, po, cs, unused, dt);
        const auto got = run_decode(p, 2, dt, b.T * row);
        std::vector<float> want(got.size(), 0.f);
        std::copy(full.begin() + picks[0] * row, full.begin() + (picks[0] + 1) * row, want.begin());
        std::copy(full.begin() + picks[2] * row, full.begin() + (picks[2] + 1) * row, want.begin() + 2 * row);
        std::string first;
        const size_t bad = count_bad(got, want, all_rows(3), row, tol, first);
        INFO("decode step: " << first);
        CHECK(bad == 0);
        CHECK(nonzero_padding(got, b, row) == 0);
      }
      // The caches hold the same bytes (prep is per token, so the split does not change them).
      CHECK(test::byte_diff(cs.k.download(), cf.k.download(), dt) == "");
      CHECK(test::byte_diff(cs.v.download(), cf.v.download(), dt) == "");
    }
  }
}

TEST_CASE("attention generic head sizes: the launchers' checks hold for every D", "[gpu][attention][generic]") {
  test::DevBuf buf(4096);
  const Batch b = make_batch({{0, 1, 0}}, 0);
  DevMeta dm(b);
  AttentionParams p;
  p.q = p.gate = p.k_cache = p.v_cache = buf.data();
  p.out = buf.data();
  p.meta = dm.meta();
  p.T = b.T;
  p.Hq = 4;
  p.Hkv = 2;
  p.max_context = 4;
  for (int D : {0, 257, 512}) {  // outside 1..256
    CAPTURE(D);
    p.D = D;
    CHECK(attention_decode(p, nullptr) == cudaErrorInvalidValue);
    CHECK(attention_prefill(p, nullptr) == cudaErrorInvalidValue);
  }
  p.D = 24;
  p.Hkv = 3;  // Hq % Hkv != 0
  CHECK(attention_decode(p, nullptr) == cudaErrorInvalidValue);
  p.Hkv = 2;
  p.cache_dtype = DType::f16;
  CHECK(attention_decode(p, nullptr) == cudaErrorInvalidValue);
  CHECK(attention_prefill(p, nullptr) == cudaErrorInvalidValue);
  p.cache_dtype = DType::f32;
  p.k_cache = static_cast<const char*>(buf.data()) + 4;  // one contract for every D: 16-byte aligned caches
  CHECK(attention_decode(p, nullptr) == cudaErrorInvalidValue);
  CHECK(attention_prefill(p, nullptr) == cudaErrorInvalidValue);
  p.k_cache = buf.data();
  p.splits = 2;  // split-K without a workspace
  CHECK(attention_decode(p, nullptr) == cudaErrorInvalidValue);
  check(cudaDeviceSynchronize());  // nothing was launched
}
