// GPU tests of the tensor-core attention prefills, mma.sync (attention_prefill_mma.h) and wgmma
// (attention_prefill_wgmma.h, compute capability 9.0 only; D 64/128/256), each case run for both
// (shared pieces: attention_fixture.h): varlen batches with history, zero-length sequences, a padding sequence
// and padding rows, lengths across several key tiles, D 32/64/128/256 and GQA groups 1/2/4,
// against the CPU attention reference fed the GPU's own q / gate / bf16 cache, with the bf16
// output tolerance of test_attention.cpp (2^-6 |r| + 1e-5, for bf16 and f32 outputs alike), and
// f32 outputs against the f32 CUDA-core kernel within 2^-12 |r| + 2^-14 max |v| (proves the P split);
// padding rows exactly zero, rows past the live count zero (as attention_prefill), rows >= T
// untouched; graph replay == eager bytes; two runs give the same bytes; unsupported params rejected.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/attention_prefill_mma.h"
#include "kernels/attention_prefill_wgmma.h"
#include "kernels/attention_shapes.h"
#include "models/step_settings.h"
#include "tests/gpu/attention_fixture.h"
#include "tests/support/catch.h"

using namespace sg;
using namespace sg::test::attn;

namespace {

// Both output dtypes: 2^-6 |r| + 1e-5 (test_attention.cpp's bf16 tolerance; f32 outputs do not
// meet its f32 one, 1e-4 |r| + 2e-6, by design: the P split leaves up to 2^-16 max |v|).
Tol out_tol(DType) { return Tol{std::ldexp(1.0, -6), 1e-5}; }

// Lengths 1, 15, 16, 17, 63, 64, 65, 200, 1024 with and without history, a zero-length sequence,
// a padding sequence, 5 padding rows.
const std::vector<Seq> kSeqs = {{0, 1, 0},      {9, 15, 1},    {0, 16, 2}, {40, 17, 3}, {0, 0, 4},
                                {70, 63, 5},    {0, 64, 6},    {3, 65, 7}, {2, 3, -1},  {0, 200, 8},
                                {130, 1024, 9}, {0, 1024, 10}, {1, 1, 11}};

Shape shape_for(int D, int Hq, int Hkv) { return {Hq, Hkv, D, D / 4, 1e7}; }

// The two tensor-core prefills; `runs(D)` says whether the kernel runs head size D on this device.
struct TcKernel {
  const char* name;
  cudaError_t (*launch)(const AttentionParams&, cudaStream_t);
  bool (*runs)(int D);
};
bool on_cc90() {
  const DeviceLimits d = DeviceLimits::current();
  return attention_prefill_wgmma_device(d.cc_major, d.cc_minor);
}
const TcKernel kTcKernels[] = {
    {"mma", [](const AttentionParams& p, cudaStream_t s) { return attention_prefill_mma(p, s); },
     [](int D) { return attention_prefill_mma_supports(D, DType::bf16, DType::bf16); }},
    {"wgmma", attention_prefill_wgmma,
     [](int D) { return attention_prefill_wgmma_supports(D, DType::bf16, DType::bf16) && on_cc90(); }},
};

struct Problem {
  Shape sh;
  Batch b;
  DevMeta dm;
  Cache c;
  PrepOut po;
  Problem(const Shape& s, const std::vector<Seq>& seqs, int pad, int max_ctx, uint64_t seed)
      : sh(s), b(make_batch(seqs, pad)), dm(b), c(s, 12, max_ctx, 0xFF), po(make(seqs, seed)) {}

 private:
  PrepOut make(const std::vector<Seq>& seqs, uint64_t seed) {
    const Inputs in = make_inputs(sh, b.T, seed);
    fill_history(sh, c, seqs, seed + 10);
    return run_prep(sh, b, dm, in, c);
  }
};

}  // namespace

TEST_CASE("attention prefill mma: varlen with history, zero-length sequences and padding match the reference",
          "[gpu][attention][mma][wgmma]") {
  for (const TcKernel& k : kTcKernels) {
    for (int D : {32, 64, 128, 256}) {
      for (auto [Hq, Hkv] : {std::pair{2, 2}, {4, 2}, {8, 2}}) {
        const Shape sh = shape_for(D, Hq, Hkv);
        CAPTURE(k.name, D, Hq, Hkv);
        REQUIRE(attention_prefill_mma_supports(D, DType::bf16, DType::bf16));
        if (!k.runs(D)) continue;
        const uint64_t seed = 12000 + D + Hq;
        INFO("seed " << seed);
        Problem pr(sh, kSeqs, 5, 1200, seed);
        const Batch& b = pr.b;
        const auto q = pr.po.q.download_f32(DType::bf16), gate = pr.po.gate.download_f32(DType::bf16);
        const auto kc = pr.c.k.download_f32(DType::bf16), vc = pr.c.v.download_f32(DType::bf16);
        std::vector<int> rows;  // every row, except every 4th of the two 1024-token sequences
        int t0 = 0;
        for (const Seq& s : kSeqs) {
          for (int i = 0; i < s.n; ++i)
            if (s.n < 1024 || i % 4 == 0 || i >= s.n - 4) rows.push_back(t0 + i);
          t0 += s.n;
        }
        for (int t = t0; t < b.T; ++t) rows.push_back(t);
        const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
        for (DType ot : {DType::bf16, DType::f32}) {
          CAPTURE(dtype_name(ot));
          const auto want =
              ref_attention(sh, b, q, gate, kc, vc, pr.c, rows, ot == DType::bf16 ? ref::Store::bf16 : ref::Store::f32);
          test::DevBuf out(b.T * row * dtype_size(ot));
          AttentionParams p = attn_params(sh, b, pr.dm, pr.po, pr.c, out, ot);
          check(k.launch(p, nullptr));
          check(cudaDeviceSynchronize());
          const auto got = out.download_f32(ot);
          CHECK_FALSE(has_nan(got));
          std::string first;
          const size_t bad = count_bad(got, want, rows, row, out_tol(ot), first);
          INFO(first);
          CHECK(bad == 0);
          if (ot == DType::f32) {
            // Against the f32 CUDA-core kernel on the same inputs, tighter: 2^-12 |r| + 2^-14 max |v|.
            // With the P split the two differ by summation orders and <= 2^-16 max |v|; with P only
            // rounded to bf16 (no P_lo) by ~2^-9 of each term, which the short sequences' rows fail.
            test::DevBuf out2(b.T * row * dtype_size(ot));
            check(attention_prefill(attn_params(sh, b, pr.dm, pr.po, pr.c, out2, ot), nullptr));
            check(cudaDeviceSynchronize());
            double vmax = 0;
            for (float x : vc) vmax = std::max(vmax, static_cast<double>(std::fabs(x)));
            std::string first2;
            const size_t far = count_bad(got, out2.download_f32(ot), rows, row,
                                         Tol{std::ldexp(1.0, -12), std::ldexp(1.0, -14) * vmax}, first2);
            INFO("against the f32 CUDA-core kernel: " << first2);
            CHECK(far == 0);
          }
          size_t nonzero_pad = 0;  // padding rows: exactly zero
          for (int t = 0; t < b.T; ++t)
            if (!b.live(t))
              for (size_t i = t * row; i < (t + 1) * row; ++i) nonzero_pad += got[i] != 0.0f;
          CHECK(nonzero_pad == 0);
        }
      }
    }
  }
}

TEST_CASE(
    "attention prefill mma: rows past the live count are zero, rows >= T untouched, replay and reruns give the same "
    "bytes",
    "[gpu][attention][mma][wgmma]") {
  for (const TcKernel& k : kTcKernels) {
    for (int D : {64, 256}) {
      CAPTURE(k.name, D);
      if (!k.runs(D)) continue;
      const Shape sh = shape_for(D, 8, 2);
      const std::vector<Seq> seqs = {{0, 70, 0}, {5, 33, 1}, {0, 130, 2}};
      Problem pr(sh, seqs, 7, 300, 13000 + D);
      const Batch& b = pr.b;
      const size_t row = static_cast<size_t>(sh.Hq) * sh.D, extra = 9;
      const int live = 150;  // *num_tokens: rows live .. T-1 are padding
      test::DevBuf ntok = test::DevBuf::from_i32({live});
      auto run = [&](cudaStream_t s, test::DevBuf& out, bool graph) {
        AttentionParams p = attn_params(sh, b, pr.dm, pr.po, pr.c, out, DType::bf16);
        p.meta.num_tokens = ntok.as<int32_t>();
        run_once(s, graph, [&](cudaStream_t st) { return k.launch(p, st); });
      };
      const auto e = eager_rerun_replay((b.T + extra) * row * 2, run);
      const auto got = test::from_bytes(e, DType::bf16);
      size_t nonzero = 0, touched = 0;
      for (size_t i = live * row; i < b.T * row; ++i) nonzero += got[i] != 0.0f;
      for (size_t i = b.T * row * 2; i < e.size(); ++i) touched += e[i] != 0x5A;
      CHECK(nonzero == 0);
      CHECK(touched == 0);
      // The live rows agree with the reference.
      const auto q = pr.po.q.download_f32(DType::bf16), gate = pr.po.gate.download_f32(DType::bf16);
      const auto kc = pr.c.k.download_f32(DType::bf16), vc = pr.c.v.download_f32(DType::bf16);
      std::vector<int> rows(live);
      for (int t = 0; t < live; ++t) rows[t] = t;
      const auto want = ref_attention(sh, b, q, gate, kc, vc, pr.c, rows, ref::Store::bf16);
      std::string first;
      const size_t bad = count_bad(got, want, rows, row, out_tol(DType::bf16), first);
      INFO(first);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("attention prefill mma: unsupported params are rejected", "[gpu][attention][mma][wgmma]") {
  CHECK_FALSE(attention_prefill_mma_supports(16, DType::bf16, DType::bf16));
  CHECK_FALSE(attention_prefill_mma_supports(256, DType::f32, DType::bf16));
  CHECK_FALSE(attention_prefill_mma_supports(256, DType::bf16, DType::f32));
  const Shape sh = shape_for(64, 4, 2);
  Problem pr(sh, {{0, 5, 0}}, 0, 16, 14000);
  test::DevBuf out(pr.b.T * sh.Hq * sh.D * 2);
  AttentionParams p = attn_params(sh, pr.b, pr.dm, pr.po, pr.c, out, DType::bf16);
  check(attention_prefill_mma(p, nullptr));
  check_mma_rejects(p, [](const AttentionParams& q) { return attention_prefill_mma(q, nullptr); });
  // wgmma: D 64, 128, 256 only (32 too is refused); the same checks where it runs.
  CHECK_FALSE(attention_prefill_wgmma_supports(32, DType::bf16, DType::bf16));
  CHECK_FALSE(attention_prefill_wgmma_supports(256, DType::f32, DType::bf16));
  AttentionParams d32 = p;
  d32.D = 32;
  CHECK(attention_prefill_wgmma(d32, nullptr) == cudaErrorInvalidValue);
  if (on_cc90()) {
    check(attention_prefill_wgmma(p, nullptr));
    check_mma_rejects(p, [](const AttentionParams& q) { return attention_prefill_wgmma(q, nullptr); });
  }
  check(cudaDeviceSynchronize());
}

TEST_CASE("attention prefill mma: one and two K/V buffers give the same bytes, and so does the default",
          "[gpu][attention][mma]") {
  // The same products in the same order: only when the copies are requested differs. Lengths up to
  // 1024 with history: passes of many key tiles, the last one partial.
  const DeviceLimits dev = DeviceLimits::current();
  for (int D : {32, 64, 128, 256}) {
    CAPTURE(D);
    const Shape sh = shape_for(D, 8, 2);
    Problem pr(sh, kSeqs, 5, 1200, 16000 + D);
    const Batch& b = pr.b;
    const size_t bytes = b.T * static_cast<size_t>(sh.Hq) * sh.D * 4;
    test::DevBuf o1(bytes), o2(bytes), o0(bytes);
    check(attention_prefill_mma(attn_params(sh, b, pr.dm, pr.po, pr.c, o1, DType::f32), nullptr, 1));
    const bool two = attention_prefill_mma_smem(D, 2) <= static_cast<size_t>(dev.smem_optin);  // it launches
    if (two) check(attention_prefill_mma(attn_params(sh, b, pr.dm, pr.po, pr.c, o2, DType::f32), nullptr, 2));
    check(attention_prefill_mma(attn_params(sh, b, pr.dm, pr.po, pr.c, o0, DType::f32), nullptr));
    check(cudaDeviceSynchronize());
    const auto one = o1.download();
    if (two) {
      CHECK(test::byte_diff(o2.download(), one, DType::f32) == "");
    } else {
      WARN("two K/V buffers need " << attention_prefill_mma_smem(D, 2) << " bytes a block: not tested at D " << D);
    }
    CHECK(test::byte_diff(o0.download(), one, DType::f32) == "");  // whichever the default took
  }
  AttentionParams p{};
  CHECK(attention_prefill_mma(p, nullptr, 3) == cudaErrorInvalidValue);
  CHECK(attention_prefill_mma(p, nullptr, -1) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_CASE("attention prefill wgmma: the mma kernel's bytes at D 64 and 128, within the tolerance at 256",
          "[gpu][attention][mma][wgmma]") {
  // At D 64 and 128 both kernels take 64-key tiles, so the softmax rescales at the same keys and
  // the tensor cores accumulate the same products in the same k-step order: the same bytes. At 256
  // the mma kernel takes 32-key tiles: the count of differing outputs is reported, the outputs held
  // to the output tolerance.
  if (!on_cc90()) {
    WARN("the wgmma kernel runs on compute capability 9.0 only: not tested on this device");
    return;
  }
  for (int D : {64, 128, 256}) {
    CAPTURE(D);
    const Shape sh = shape_for(D, 8, 2);
    Problem pr(sh, kSeqs, 5, 1200, 15000 + D);
    const Batch& b = pr.b;
    const size_t row = static_cast<size_t>(sh.Hq) * sh.D;
    test::DevBuf o1(b.T * row * 4), o2(b.T * row * 4);
    check(attention_prefill_mma(attn_params(sh, b, pr.dm, pr.po, pr.c, o1, DType::f32), nullptr));
    check(attention_prefill_wgmma(attn_params(sh, b, pr.dm, pr.po, pr.c, o2, DType::f32), nullptr));
    check(cudaDeviceSynchronize());
    const auto a = o1.download_f32(DType::f32), w = o2.download_f32(DType::f32);
    size_t differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += a[i] != w[i] && !(std::isnan(a[i]) && std::isnan(w[i]));
    WARN("D " << D << ": " << differ << " of " << a.size() << " f32 outputs differ from the mma kernel's");
    if (D != 256) CHECK(differ == 0);  // the same 64-key tiles: the same bytes (seen on the H200)
    std::vector<int> rows(b.T);
    for (int t = 0; t < b.T; ++t) rows[t] = t;
    std::string first;
    const size_t bad = count_bad(w, a, rows, row, out_tol(DType::f32), first);
    INFO(first);
    CHECK(bad == 0);
  }
}
