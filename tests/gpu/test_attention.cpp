// GPU tests of the full-attention kernels over a bf16 KV cache (the f32 cache, the parity mode:
// test_attention_f32_cache.cpp; shared pieces: attention_fixture.h): attn_prep (q/k norm + RoPE,
// gate split, KV append) against the CPU references, with the KV cache poisoned so a stray write
// is seen; decode (every split count) and varlen prefill (history, zero-length sequences, padding)
// against the CPU attention reference fed the GPU's own q / gate / cache; prefill n then decode m
// against prefill n + m.
// Tolerances: q/k from attn_prep (bf16): 1 ulp + 1e-5 abs (rotate-half cancellation) (the norm's sum order differs;
// pow/sin/cos are computed in double and rounded, so they match the f32 reference to the last bit almost always). v and
// gate: exact bytes. Attention outputs: bf16 2 ulp (2^-6 |r|) + 1e-5 abs; f32 1e-4 |r| + 2e-6 abs (online softmax and
// tree/split merges sum in a different order).
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

// Attention output tolerance over a bf16 cache, by output dtype (see the top of the file).
Tol out_tol(DType t) { return t == DType::bf16 ? Tol{std::ldexp(1.0, -6), 1e-5} : Tol{1e-4, 2e-6}; }

}  // namespace

TEST_CASE("attention prep: q, gate and the KV cache match the reference, no other cache byte written",
          "[gpu][attention]") {
  for (const Shape& sh : kShapes) {
    CAPTURE(sh.Hq, sh.Hkv, sh.D, sh.rot);
    // Four live sequences (one with long history, one zero-length), a padding sequence, 3 padding rows.
    const std::vector<Seq> seqs = {{0, 5, 3}, {17, 3, 0}, {1020, 4, 4}, {7, 0, 1}, {2, 3, -1}};
    const Batch b = make_batch(seqs, 3);
    const uint64_t seed = 7000 + sh.D + sh.Hq;
    INFO("seed " << seed);
    const Inputs in = make_inputs(sh, b.T, seed);
    DevMeta dm(b);
    Cache c(sh, 5, 1100, 0xA5);
    PrepOut po = run_prep(sh, b, dm, in, c);

    // Reference.
    const size_t qrow = static_cast<size_t>(sh.Hq) * sh.D, krow = static_cast<size_t>(sh.Hkv) * sh.D;
    std::vector<float> q(b.T * qrow), gate(b.T * qrow), k = in.k;
    std::vector<int64_t> pos64(b.positions.begin(), b.positions.end());
    ref::split_q_gate(in.qg.data(), q.data(), gate.data(), b.T, sh.Hq, sh.D);
    ref::rmsnorm(q.data(), in.qn.data(), q.data(), static_cast<int64_t>(b.T) * sh.Hq, sh.D, kEps);
    ref::rope(q.data(), pos64.data(), b.T, sh.Hq, sh.D, sh.rot, sh.theta, ref::Store::bf16);
    ref::rmsnorm(k.data(), in.kn.data(), k.data(), static_cast<int64_t>(b.T) * sh.Hkv, sh.D, kEps);
    ref::rope(k.data(), pos64.data(), b.T, sh.Hkv, sh.D, sh.rot, sh.theta, ref::Store::bf16);
    for (int t = 0; t < b.T; ++t) {
      if (b.live(t)) continue;
      std::fill(q.begin() + t * qrow, q.begin() + (t + 1) * qrow, 0.f);
      std::fill(gate.begin() + t * qrow, gate.begin() + (t + 1) * qrow, 0.f);
    }
    // q within 1 ulp, gate exact.
    auto gq = po.q.download_f32(DType::bf16);
    size_t bad_q = 0;
    for (size_t i = 0; i < q.size(); ++i)
      bad_q += !(std::fabs(gq[i] - q[i]) <= std::ldexp(1.0, -7) * std::fabs(q[i]) + 1e-5);
    CHECK(bad_q == 0);
    CHECK(test::byte_diff(po.gate.download(), test::to_bytes(gate, DType::bf16), DType::bf16) == "");

    // Cache: the live tokens' (slot, pos) rows hold k (1 ulp) and v (exact); every other byte is poison.
    auto kb = c.k.download(), vb = c.v.download();
    auto kf = test::from_bytes(kb, DType::bf16), vf = test::from_bytes(vb, DType::bf16);
    std::vector<uint8_t> written(c.elems, 0);
    size_t bad_k = 0, bad_v = 0, stray = 0;
    for (int t = 0; t < b.T; ++t) {
      if (!b.live(t)) continue;
      for (size_t e = 0; e < krow; ++e) {
        const size_t ci = c.index(sh, b.slot(t), b.positions[t], 0, 0) + e;
        written[ci] = 1;
        const float rk = k[t * krow + e], rv = in.v[t * krow + e];
        bad_k += !(std::fabs(kf[ci] - rk) <= std::ldexp(1.0, -7) * std::fabs(rk) + 1e-5);
        bad_v += !(vf[ci] == rv);
      }
    }
    for (size_t i = 0; i < c.elems; ++i) {
      if (written[i]) continue;
      stray += kb[2 * i] != 0xA5 || kb[2 * i + 1] != 0xA5 || vb[2 * i] != 0xA5 || vb[2 * i + 1] != 0xA5;
    }
    CHECK(bad_k == 0);
    CHECK(bad_v == 0);
    CHECK(stray == 0);

    // With the rotary table (the 16-byte kernel: bf16 throughout, D <= 256, rotary % 16 == 0):
    // the same bytes in q, gate and the whole cache as the per-element kernel above.
    Cache c2(sh, 5, 1100, 0xA5);
    PrepOut pt = run_prep(sh, b, dm, in, c2, /*rope_table=*/true);
    CHECK(pt.q.download() == po.q.download());
    CHECK(pt.gate.download() == po.gate.download());
    CHECK(c2.k.download() == kb);
    CHECK(c2.v.download() == vb);
    // bf16 norm weights: both kernels again, byte for byte.
    Cache c3(sh, 5, 1100, 0xA5), c4(sh, 5, 1100, 0xA5);
    PrepOut pe = run_prep(sh, b, dm, in, c3, /*rope_table=*/false, DType::bf16);
    PrepOut pv = run_prep(sh, b, dm, in, c4, /*rope_table=*/true, DType::bf16);
    CHECK(pv.q.download() == pe.q.download());
    CHECK(pv.gate.download() == pe.gate.download());
    CHECK(c4.k.download() == c3.k.download());
    CHECK(c4.v.download() == c3.v.download());
    CHECK(pe.q.download() != po.q.download());  // the weights' rounding reached q: not the f32 run again
  }
}

TEST_CASE("attention decode: every split count matches the reference, padding rows are zero", "[gpu][attention]") {
  for (const Shape& sh : kShapes) {
    for (DType ot : {DType::bf16, DType::f32}) {
      CAPTURE(sh.Hq, sh.Hkv, sh.D, dtype_name(ot));
      // Contexts 1, 17, 1024, 4096 (the new token at position ctx-1), a padding sequence, a padding row.
      const std::vector<Seq> seqs = {{0, 1, 2}, {16, 1, 0}, {1023, 1, 5}, {4095, 1, 3}, {9, 1, -1}};
      const Batch b = make_batch(seqs, 1);
      const uint64_t seed = 8000 + sh.D + sh.Hq;
      INFO("seed " << seed);
      const Inputs in = make_inputs(sh, b.T, seed);
      DevMeta dm(b);
      Cache c(sh, 6, 4100, 0xFF);  // poison = bf16 NaN: a read outside the context shows
      fill_history(sh, c, seqs, seed + 10);
      PrepOut po = run_prep(sh, b, dm, in, c);
      const auto q = po.q.download_f32(DType::bf16), gate = po.gate.download_f32(DType::bf16);
      const auto kc = c.k.download_f32(DType::bf16), vc = c.v.download_f32(DType::bf16);
      const auto rows = all_rows(b.T);
      const auto want =
          ref_attention(sh, b, q, gate, kc, vc, c, rows, ot == DType::bf16 ? ref::Store::bf16 : ref::Store::f32);
      const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
      const int picked = attention_decode_pick_splits(b.T, sh.Hq, sh.Hkv, c.max_ctx, 132);
      for (int splits : {1, 2, 3, 8, 32, picked}) {
        CAPTURE(splits);
        test::DevBuf out(b.T * row * dtype_size(ot));  // poisoned
        test::DevBuf ws(std::max<size_t>(4, attention_decode_workspace_bytes(b.T, sh.Hq, sh.D, splits)));
        AttentionParams p = attn_params(sh, b, dm, po, c, out, ot);
        p.splits = splits;
        p.workspace = ws.as<float>();
        check(attention_decode(p, nullptr));
        check(cudaDeviceSynchronize());
        const auto got = out.download_f32(ot);
        CHECK_FALSE(has_nan(got));
        std::string first;
        const size_t bad = count_bad(got, want, rows, row, out_tol(ot), first);
        INFO(first);
        CHECK(bad == 0);
      }
    }
  }
}

namespace {
// The simt prefill kernel on prefill case ci of shape sh, bf16 and f32 outputs, against the
// reference; then the decode kernel on the same rows.
void check_prefill_case(const Shape& sh, size_t ci) {
  const PrefillCase& cs = prefill_cases()[ci];
  CAPTURE(sh.Hq, sh.Hkv, sh.D, ci);
  const Batch b = make_batch(cs.seqs, cs.pad);
  const uint64_t seed = 9000 + sh.D + sh.Hq + ci;
  INFO("seed " << seed);
  const Inputs in = make_inputs(sh, b.T, seed);
  DevMeta dm(b);
  Cache c(sh, 5, cs.max_ctx, 0xFF);
  fill_history(sh, c, cs.seqs, seed + 10);
  PrepOut po = run_prep(sh, b, dm, in, c);
  const auto q = po.q.download_f32(DType::bf16), gate = po.gate.download_f32(DType::bf16);
  const auto kc = c.k.download_f32(DType::bf16), vc = c.v.download_f32(DType::bf16);
  const std::vector<int> rows = cs.rows(b.T);
  const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
  for (DType ot : {DType::bf16, DType::f32}) {
    CAPTURE(dtype_name(ot));
    const auto want =
        ref_attention(sh, b, q, gate, kc, vc, c, rows, ot == DType::bf16 ? ref::Store::bf16 : ref::Store::f32);
    test::DevBuf out(b.T * row * dtype_size(ot));
    check_prefill_then_decode(attn_params(sh, b, dm, po, c, out, ot), out, b.T, row, ot, want, rows, out_tol(ot));
  }
}
}  // namespace

TEST_CASE("attention prefill: history, zero-length sequences and padding match the reference and decode",
          "[gpu][attention]") {
  for (const Shape& sh : kShapes) {
    for (size_t ci = 0; ci < prefill_cases().size(); ++ci) {
      if (ci == 2 && sh.Hq != 4 && sh.Hq != 16) continue;  // keep the CPU reference time bounded
      check_prefill_case(sh, ci);
    }
  }
}

// The smallest shape's first case alone: the case compute-sanitizer's racecheck runs for the simt
// prefill kernel (tools/gpu_check.sh), which does not finish the whole test above in its limit.
TEST_CASE("attention prefill: the smallest shape's first case", "[gpu][attention]") {
  check_prefill_case(kShapes[2], 0);
}

TEST_CASE("attention: prefill n then decode m equals prefill n plus m", "[gpu][attention]") {
  for (const Shape& sh : kShapes) {
    CAPTURE(sh.Hq, sh.Hkv, sh.D);
    const int n0 = 37, n1 = 1, m = 5;
    const uint64_t seed = 9500 + sh.D + sh.Hq;
    INFO("seed " << seed);
    // Full run: both sequences prefilled with n + m tokens in one batch.
    const std::vector<Seq> full_seqs = {{0, n0 + m, 2}, {0, n1 + m, 0}};
    const Batch bf = make_batch(full_seqs, 2);
    const Inputs inf = make_inputs(sh, bf.T, seed);
    const size_t qg_row = static_cast<size_t>(sh.Hq) * 2 * sh.D, kv_row = static_cast<size_t>(sh.Hkv) * sh.D;
    const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
    DevMeta dmf(bf);
    Cache cf(sh, 3, 64, 0xFF);
    PrepOut pof = run_prep(sh, bf, dmf, inf, cf);
    test::DevBuf outf(bf.T * row * 2);
    AttentionParams pf = attn_params(sh, bf, dmf, pof, cf, outf, DType::bf16);
    check(attention_prefill(pf, nullptr));
    check(cudaDeviceSynchronize());
    const auto full = outf.download_f32(DType::bf16);
    const int start[2] = {0, n0 + m};  // token index of each sequence in the full batch

    // Tokens [begin, begin + cnt) of each sequence, taken from the full run's inputs.
    auto slice = [&](int cnt0, int cnt1, int begin0, int begin1) {
      Inputs in;
      in.qn = inf.qn;
      in.kn = inf.kn;
      const int cnt[2] = {cnt0, cnt1}, beg[2] = {begin0, begin1};
      for (int s = 0; s < 2; ++s) {
        const int t0 = start[s] + beg[s];
        in.qg.insert(in.qg.end(), inf.qg.begin() + t0 * qg_row, inf.qg.begin() + (t0 + cnt[s]) * qg_row);
        in.k.insert(in.k.end(), inf.k.begin() + t0 * kv_row, inf.k.begin() + (t0 + cnt[s]) * kv_row);
        in.v.insert(in.v.end(), inf.v.begin() + t0 * kv_row, inf.v.begin() + (t0 + cnt[s]) * kv_row);
      }
      return in;
    };
    Cache cs(sh, 3, 64, 0xFF);
    {
      const Batch b = make_batch({{0, n0, 2}, {0, n1, 0}}, 0);
      Inputs in = slice(n0, n1, 0, 0);
      DevMeta dm(b);
      PrepOut po = run_prep(sh, b, dm, in, cs);
      test::DevBuf out(b.T * row * 2);
      AttentionParams p = attn_params(sh, b, dm, po, cs, out, DType::bf16);
      check(attention_prefill(p, nullptr));
      check(cudaDeviceSynchronize());
      const auto got = out.download_f32(DType::bf16);
      std::vector<float> want(got.size());
      std::copy(full.begin(), full.begin() + n0 * row, want.begin());
      std::copy(full.begin() + start[1] * row, full.begin() + (start[1] + n1) * row, want.begin() + n0 * row);
      std::string first;
      const size_t bad = count_bad(got, want, all_rows(b.T), row, out_tol(DType::bf16), first);
      INFO("prefill part: " << first);
      CHECK(bad == 0);
    }
    for (int i = 0; i < m; ++i) {
      CAPTURE(i);
      // Decode batch: a padding row between the two sequences' rows.
      Batch b;
      b.slots = {2, 0};
      b.positions = {n0 + i, 0, n1 + i};
      b.token_seq = {0, -1, 1};
      b.T = 3;
      Inputs two = slice(1, 1, n0 + i, n1 + i);
      Inputs in = two;
      in.qg.clear();
      in.k.clear();
      in.v.clear();
      for (int r = 0; r < 3; ++r) {  // rows 0 and 2 from the slice, row 1 junk
        const int src = r == 2 ? 1 : 0;
        in.qg.insert(in.qg.end(), two.qg.begin() + src * qg_row, two.qg.begin() + (src + 1) * qg_row);
        in.k.insert(in.k.end(), two.k.begin() + src * kv_row, two.k.begin() + (src + 1) * kv_row);
        in.v.insert(in.v.end(), two.v.begin() + src * kv_row, two.v.begin() + (src + 1) * kv_row);
      }
      DevMeta dm(b);
      PrepOut po = run_prep(sh, b, dm, in, cs);
      test::DevBuf out(b.T * row * 2);
      test::DevBuf ws(attention_decode_workspace_bytes(b.T, sh.Hq, sh.D, 2));
      AttentionParams p = attn_params(sh, b, dm, po, cs, out, DType::bf16);
      p.splits = 2;
      p.workspace = ws.as<float>();
      check(attention_decode(p, nullptr));
      check(cudaDeviceSynchronize());
      const auto got = out.download_f32(DType::bf16);
      std::vector<float> want(got.size(), 0.f);
      std::copy(full.begin() + (start[0] + n0 + i) * row, full.begin() + (start[0] + n0 + i + 1) * row, want.begin());
      std::copy(full.begin() + (start[1] + n1 + i) * row, full.begin() + (start[1] + n1 + i + 1) * row,
                want.begin() + 2 * row);
      std::string first;
      const size_t bad = count_bad(got, want, all_rows(3), row, out_tol(DType::bf16), first);
      INFO("decode step: " << first);
      CHECK(bad == 0);
    }
    // The caches hold the same bytes (prep is per token, so the split does not change them).
    CHECK(test::byte_diff(cs.k.download(), cf.k.download(), DType::bf16) == "");
    CHECK(test::byte_diff(cs.v.download(), cf.v.download(), DType::bf16) == "");
  }
}
