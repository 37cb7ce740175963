// GPU tests of the tensor-core attention decode (attention_decode_mma.h; shared pieces:
// attention_fixture.h): D 64/128/256, GQA groups 1/2/4/6/8, contexts across the 16-key tiles and
// the 4 warps' tile rotation (1 .. 4096, history), a padding sequence and a padding row, every
// split count the model can pick and some it does not, against the CPU attention reference fed
// the GPU's own q / gate / bf16 cache, with the bf16 output tolerance of test_attention.cpp
// (2^-6 |r| + 1e-5, for bf16 and f32 outputs alike); f32 outputs against the f32 CUDA-core
// decode within 2^-12 |r| + 2^-14 max |v| (proves the P split); padding rows exactly zero; graph
// replay == eager == a rerun, byte for byte; a NaN in one sequence's cache never reaches another
// sequence; unsupported params rejected.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_decode_mma.h"
#include "tests/gpu/attention_fixture.h"
#include "tests/support/catch.h"

using namespace sg;
using namespace sg::test::attn;

namespace {

Tol out_tol() { return Tol{std::ldexp(1.0, -6), 1e-5}; }

Shape shape_for(int D, int Hq, int Hkv) { return {Hq, Hkv, D, D / 4, 1e7}; }

// One decode row per sequence: the new token at position ctx - 1 (history ctx - 1 tokens).
std::vector<Seq> decode_seqs(const std::vector<int>& contexts) {
  std::vector<Seq> s;
  for (size_t i = 0; i < contexts.size(); ++i) s.push_back({contexts[i] - 1, 1, static_cast<int>(i)});
  return s;
}

struct Problem {
  Shape sh;
  std::vector<Seq> seqs;
  Batch b;
  DevMeta dm;
  Cache c;
  PrepOut po;
  Problem(const Shape& s, std::vector<Seq> sq, int pad, int max_ctx, uint64_t seed)
      : sh(s),
        seqs(std::move(sq)),
        b(make_batch(seqs, pad)),
        dm(b),
        c(s, static_cast<int>(seqs.size()) + 1, max_ctx, 0xFF),
        po(make(seed)) {}

 private:
  PrepOut make(uint64_t seed) {
    const Inputs in = make_inputs(sh, b.T, seed);
    fill_history(sh, c, seqs, seed + 10);
    return run_prep(sh, b, dm, in, c);
  }
};

std::vector<float> run_decode(const Problem& pr, DType ot, int splits, bool mma_kernel) {
  const size_t row = static_cast<size_t>(pr.sh.Hq) * pr.sh.D;
  test::DevBuf out(pr.b.T * row * dtype_size(ot));  // poisoned
  test::DevBuf ws(std::max<size_t>(4, attention_decode_workspace_bytes(pr.b.T, pr.sh.Hq, pr.sh.D, splits)));
  AttentionParams p = attn_params(pr.sh, pr.b, pr.dm, pr.po, pr.c, out, ot);
  p.splits = splits;
  p.workspace = ws.as<float>();
  check(mma_kernel ? attention_decode_mma(p, nullptr) : attention_decode(p, nullptr));
  check(cudaDeviceSynchronize());
  return out.download_f32(ot);
}

}  // namespace

TEST_CASE("attention decode mma: every split count matches the reference and the f32 kernel, padding rows are zero",
          "[gpu][attention][mma][decode_mma]") {
  // Contexts 1, 15, 16, 17, 63, 64, 65, 100, 1023, 4096: tiles cut at every boundary, warps with
  // and without tiles; a padding sequence (slot -1) and a padding row.
  std::vector<Seq> seqs = decode_seqs({1, 15, 16, 17, 63, 64, 65, 100, 1023, 4096});
  seqs.push_back({9, 1, -1});
  for (int D : {64, 128, 256}) {
    for (auto [Hq, Hkv] : {std::pair{2, 2}, {4, 2}, {16, 4}, {24, 4}, {16, 2}}) {
      if (D != 256 && Hq > 16) continue;  // the 27B grouping only at its head size
      const Shape sh = shape_for(D, Hq, Hkv);
      CAPTURE(D, Hq, Hkv);
      REQUIRE(attention_decode_mma_supports(Hq, Hkv, D, DType::bf16, DType::bf16));
      const uint64_t seed = 15000 + D + Hq;
      INFO("seed " << seed);
      Problem pr(sh, seqs, 1, 4100, seed);
      const Batch& b = pr.b;
      const auto q = pr.po.q.download_f32(DType::bf16), gate = pr.po.gate.download_f32(DType::bf16);
      const auto kc = pr.c.k.download_f32(DType::bf16), vc = pr.c.v.download_f32(DType::bf16);
      double vmax = 0;
      for (size_t i = 0; i < vc.size(); ++i)
        if (std::isfinite(vc[i])) vmax = std::max(vmax, static_cast<double>(std::fabs(vc[i])));
      const auto rows = all_rows(b.T);
      const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
      const int picked =
          attention_decode_mma_pick_splits(b.T, sh.Hkv, pr.c.max_ctx, 132, attention_decode_mma_blocks_per_sm(D));
      for (DType ot : {DType::bf16, DType::f32}) {
        CAPTURE(dtype_name(ot));
        const auto want =
            ref_attention(sh, b, q, gate, kc, vc, pr.c, rows, ot == DType::bf16 ? ref::Store::bf16 : ref::Store::f32);
        for (int splits : {1, 2, 3, 7, 64, picked}) {
          CAPTURE(splits);
          const auto got = run_decode(pr, ot, splits, true);
          CHECK_FALSE(has_nan(got));
          std::string first;
          const size_t bad = count_bad(got, want, rows, row, out_tol(), first);
          INFO(first);
          CHECK(bad == 0);
          size_t nonzero_pad = 0;
          for (int t = 0; t < b.T; ++t)
            if (!b.live(t))
              for (size_t i = t * row; i < (t + 1) * row; ++i) nonzero_pad += got[i] != 0.0f;
          CHECK(nonzero_pad == 0);
          if (ot == DType::f32) {
            // Against the f32 CUDA-core kernel, tighter: with the P split the two differ by
            // summation orders and <= 2^-16 max |v|; P rounded to bf16 alone misses this.
            const auto simt = run_decode(pr, ot, splits, false);
            std::string first2;
            const size_t far =
                count_bad(got, simt, rows, row, Tol{std::ldexp(1.0, -12), std::ldexp(1.0, -14) * vmax}, first2);
            INFO("against the f32 CUDA-core kernel: " << first2);
            CHECK(far == 0);
          }
        }
      }
    }
  }
}

TEST_CASE(
    "attention decode mma: graph replay, eager and a rerun give the same bytes, rows past the live count are zero",
    "[gpu][attention][mma][decode_mma]") {
  const Shape sh = shape_for(256, 16, 4);
  Problem pr(sh, decode_seqs({300, 5, 1024, 77, 2000}), 3, 2048, 16000);
  const Batch& b = pr.b;
  const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
  const int live = 4;  // *num_tokens: row 4 (a live sequence) and the padding rows read nothing
  test::DevBuf ntok = test::DevBuf::from_i32({live});
  for (int splits : {1, 5}) {
    CAPTURE(splits);
    test::DevBuf ws(std::max<size_t>(4, attention_decode_workspace_bytes(b.T, sh.Hq, sh.D, splits)));
    auto run = [&](cudaStream_t s, test::DevBuf& out, bool graph) {
      AttentionParams p = attn_params(sh, b, pr.dm, pr.po, pr.c, out, DType::bf16);
      p.meta.num_tokens = ntok.as<int32_t>();
      p.splits = splits;
      p.workspace = ws.as<float>();
      run_once(s, graph, [&](cudaStream_t st) { return attention_decode_mma(p, st); });
    };
    const auto got = test::from_bytes(eager_rerun_replay(b.T * row * 2, run), DType::bf16);
    size_t nonzero = 0;
    for (size_t i = live * row; i < b.T * row; ++i) nonzero += got[i] != 0.0f;
    CHECK(nonzero == 0);
    const auto q = pr.po.q.download_f32(DType::bf16), gate = pr.po.gate.download_f32(DType::bf16);
    const auto kc = pr.c.k.download_f32(DType::bf16), vc = pr.c.v.download_f32(DType::bf16);
    std::vector<int> rows(live);
    for (int t = 0; t < live; ++t) rows[t] = t;
    const auto want = ref_attention(sh, b, q, gate, kc, vc, pr.c, rows, ref::Store::bf16);
    std::string first;
    const size_t bad = count_bad(got, want, rows, row, out_tol(), first);
    INFO(first);
    CHECK(bad == 0);
  }
}

TEST_CASE("attention decode mma: a NaN in one sequence's cache never reaches another sequence",
          "[gpu][attention][mma][decode_mma]") {
  const Shape sh = shape_for(256, 16, 4);
  Problem pr(sh, decode_seqs({40, 33, 200}), 0, 256, 17000);
  // Poison sequence 1's value at its position 3 (inside its context) with NaN.
  const size_t at = pr.c.index(sh, 1, 3, 0, 0) * 2;
  auto vb = pr.c.v.download();
  vb[at] = 0xC0;
  vb[at + 1] = 0x7F;  // bf16 0x7FC0: quiet NaN
  pr.c.v = test::DevBuf::from_bytes(vb);
  for (int splits : {1, 4}) {
    const auto got = run_decode(pr, DType::bf16, splits, true);
    const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
    size_t nan_in_1 = 0, nan_elsewhere = 0;
    for (int t = 0; t < pr.b.T; ++t)
      for (size_t i = t * row; i < (t + 1) * row; ++i) (t == 1 ? nan_in_1 : nan_elsewhere) += std::isnan(got[i]);
    CHECK(nan_in_1 > 0);  // the poison landed (positive control)
    CHECK(nan_elsewhere == 0);
  }
}

TEST_CASE("attention decode mma: unsupported params are rejected", "[gpu][attention][mma][decode_mma]") {
  const Shape sh = shape_for(64, 4, 2);
  Problem pr(sh, decode_seqs({5, 9}), 0, 64, 18000);
  test::DevBuf out(pr.b.T * sh.Hq * sh.D * 2);
  test::DevBuf ws(attention_decode_workspace_bytes(pr.b.T, sh.Hq, sh.D, 2));
  AttentionParams p = attn_params(sh, pr.b, pr.dm, pr.po, pr.c, out, DType::bf16);
  check(attention_decode_mma(p, nullptr));
  check_mma_rejects(p, [](const AttentionParams& q) { return attention_decode_mma(q, nullptr); });
  AttentionParams bad = p;
  bad.splits = 2;  // no workspace
  CHECK(attention_decode_mma(bad, nullptr) == cudaErrorInvalidValue);
  bad.workspace = ws.as<float>();
  CHECK(attention_decode_mma(bad, nullptr) == cudaSuccess);
  bad = p;
  bad.splits = 0;
  CHECK(attention_decode_mma(bad, nullptr) == cudaErrorInvalidValue);
  check(cudaDeviceSynchronize());
}
