// The GEMM setting (models/step_settings.h): its names and which projections run the skinny
// kernel, cuBLASLt's tuned algorithm or cublasGemmEx; the cuBLASLt shape key (engine/gemm_lt.h).
#include <cstdint>
#include <utility>

#include "engine/error.h"
#include "engine/gemm_lt.h"
#include "kernels/rmsnorm.h"
#include "kernels/skinny_gemm_shapes.h"
#include "models/step_settings.h"
#include "tests/support/catch.h"
#include "tests/support/expect_error.h"

using namespace sg;

TEST_CASE("gemm setting names parse back, unknown names are refused with the valid list", "[gemm][settings]") {
  for (std::string_view n : kGemmNames) {
    CAPTURE(std::string(n));
    CHECK(gemm_name(parse_gemm(std::string(n))) == n);
  }
  try {
    parse_gemm("cutlass");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("auto, cublas, skinny, mixed, lt, lt-all, wgmma, wgmma-large") !=
          std::string::npos);
  }
}

TEST_CASE("gemm policy: mixed runs skinny up to 24 rows and for the LM head, lt for the rest of decode",
          "[gemm][settings]") {
  // mixed: the skinny kernel up to kGemmMixedSkinnyRows rows, and for the LM head at any row count.
  CHECK(gemm_uses_skinny(GemmKind::mixed, 1, 2560, 2560, 64));
  CHECK(gemm_uses_skinny(GemmKind::mixed, kGemmMixedSkinnyRows, 18432, 2560, 64));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::mixed, kGemmMixedSkinnyRows + 1, 2560, 2560, 64));
  // Above that, weights in wide blocks with at most kGemmMixedWideBlockMaxK columns stay on the
  // skinny kernel up to kGemmMixedWideBlockRows rows.
  CHECK(gemm_uses_skinny(GemmKind::mixed, kGemmMixedSkinnyRows + 1, 18432, 2560, 256));
  CHECK(gemm_uses_skinny(GemmKind::mixed, kGemmMixedWideBlockRows, 18432, kGemmMixedWideBlockMaxK, 256));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::mixed, kGemmMixedWideBlockRows, 18432, 2560, 64));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::mixed, kGemmMixedWideBlockRows, 16480, 5120, 256));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::mixed, kGemmMixedWideBlockRows + 1, 18432, 2560, 256));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::lt, kGemmMixedSkinnyRows + 1, 18432, 2560, 256));
  CHECK(gemm_uses_skinny(GemmKind::mixed, 32, kGemmMixedWideN, 2560, 64));
  // A residual projection whose partials the norm sums (mix-round partials): skinny up to 32 rows.
  CHECK(gemm_uses_skinny(GemmKind::mixed, kGemmLtMaxRows, 2560, 9216, 64, true));
  CHECK(gemm_uses_skinny(GemmKind::mixed, kGemmLtMaxRows, 5120, 17408, 64, true));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::mixed, kGemmLtMaxRows, 2560, 9216, 64, false));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::mixed, kGemmLtMaxRows + 1, 2560, 9216, 64, true));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::lt, 8, 2560, 9216, 64, true));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::cublas, 8, 2560, 9216, 64, true));
  CHECK(gemm_uses_skinny(GemmKind::mixed, 4096, 248320, 2560, 64));
  // A weight the skinny kernel takes in one wave of 272-row blocks (the 27B's gate_up): skinny up
  // to kGemmMixedWideBlockRows rows at any K.
  CHECK(gemm_uses_skinny(GemmKind::mixed, kGemmMixedWideBlockRows, 34816, 5120, kSkinnyGemmOneWaveRows));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::mixed, kGemmMixedWideBlockRows + 1, 34816, 5120, kSkinnyGemmOneWaveRows));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::lt, kGemmMixedWideBlockRows, 34816, 5120, kSkinnyGemmOneWaveRows));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::mixed, kGemmMixedWideBlockRows, 34816, 5120, 64));
  // ... and cuBLASLt's tuned algorithm for the other decode projections, cublasGemmEx for prefill.
  CHECK(gemm_uses_lt(GemmKind::mixed, 32));
  CHECK_FALSE(gemm_uses_lt(GemmKind::mixed, kGemmLtMaxRows + 1));
  // lt: cuBLASLt up to kGemmLtMaxRows rows, never the skinny kernel.
  CHECK(gemm_uses_lt(GemmKind::lt, 1));
  CHECK(gemm_uses_lt(GemmKind::lt, kGemmLtMaxRows));
  CHECK_FALSE(gemm_uses_lt(GemmKind::lt, kGemmLtMaxRows + 1));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::lt, 1, 2560, 2560, false));
  // lt-all: cuBLASLt at every row count, prefill included, never the skinny kernel.
  CHECK(gemm_uses_lt(GemmKind::lt_all, 1));
  CHECK(gemm_uses_lt(GemmKind::lt_all, kGemmLtMaxRows + 1));
  CHECK(gemm_uses_lt(GemmKind::lt_all, 32768));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::lt_all, 1, 2560, 2560, false));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::lt_all, 32, 248320, 2560, false));
  // wgmma: mixed up to kGemmLtMaxRows rows, the wgmma GEMM above (never below, never for the others).
  for (int64_t rows : {int64_t{1}, int64_t{kGemmMixedSkinnyRows}, kGemmLtMaxRows}) {
    CHECK(gemm_uses_skinny(GemmKind::wgmma, rows, 2560, 2560, false) ==
          gemm_uses_skinny(GemmKind::mixed, rows, 2560, 2560, false));
    CHECK(gemm_uses_skinny(GemmKind::wgmma, rows, 18432, 2560, true) ==
          gemm_uses_skinny(GemmKind::mixed, rows, 18432, 2560, true));
    CHECK(gemm_uses_lt(GemmKind::wgmma, rows) == gemm_uses_lt(GemmKind::mixed, rows));
    CHECK_FALSE(gemm_uses_wgmma(GemmKind::wgmma, rows));
  }
  CHECK(gemm_uses_wgmma(GemmKind::wgmma, kGemmLtMaxRows + 1));
  CHECK(gemm_uses_wgmma(GemmKind::wgmma, 32768));
  CHECK_FALSE(gemm_uses_lt(GemmKind::wgmma, kGemmLtMaxRows + 1));
  CHECK(gemm_uses_skinny(GemmKind::wgmma, 4096, 248320, 2560, false));  // the LM head as under mixed
  for (GemmKind g :
       {GemmKind::automatic, GemmKind::cublas, GemmKind::skinny, GemmKind::mixed, GemmKind::lt, GemmKind::lt_all})
    CHECK_FALSE(gemm_uses_wgmma(g, 32768));
  // wgmma-large: as wgmma from kGemmWgmmaLargeMinRows rows, cublasGemmEx between kGemmLtMaxRows and
  // that (neither the skinny kernel, cuBLASLt nor the own GEMM), mixed up to kGemmLtMaxRows.
  for (int64_t rows : {int64_t{1}, int64_t{kGemmMixedSkinnyRows}, kGemmLtMaxRows}) {
    CHECK(gemm_uses_skinny(GemmKind::wgmma_large, rows, 18432, 2560, 256) ==
          gemm_uses_skinny(GemmKind::mixed, rows, 18432, 2560, 256));
    CHECK(gemm_uses_lt(GemmKind::wgmma_large, rows) == gemm_uses_lt(GemmKind::mixed, rows));
    CHECK_FALSE(gemm_uses_wgmma(GemmKind::wgmma_large, rows));
  }
  for (int64_t rows : {kGemmLtMaxRows + 1, int64_t{300}, kGemmWgmmaLargeMinRows - 1}) {
    CHECK_FALSE(gemm_uses_wgmma(GemmKind::wgmma_large, rows));
    CHECK_FALSE(gemm_uses_lt(GemmKind::wgmma_large, rows));
    CHECK_FALSE(gemm_uses_skinny(GemmKind::wgmma_large, rows, 2560, 2560, 64));
  }
  CHECK(gemm_uses_wgmma(GemmKind::wgmma_large, kGemmWgmmaLargeMinRows));
  CHECK(gemm_uses_wgmma(GemmKind::wgmma_large, 32768));
  CHECK(gemm_uses_wgmma(GemmKind::wgmma_large, 8192));                     // the smallest step measured faster on it
  CHECK_FALSE(gemm_uses_wgmma(GemmKind::wgmma_large, 4096));               // level with cuBLAS there
  CHECK(gemm_uses_skinny(GemmKind::wgmma_large, 4096, 248320, 2560, 64));  // the LM head as under mixed
  // skinny everywhere it applies; cublas never the others.
  CHECK(gemm_uses_skinny(GemmKind::skinny, 32, 2560, 2560, false));
  CHECK_FALSE(gemm_uses_lt(GemmKind::skinny, 32));
  for (GemmKind g : {GemmKind::cublas, GemmKind::automatic}) {
    CHECK_FALSE(gemm_uses_skinny(g, 1, 248320, 2560, false));
    CHECK_FALSE(gemm_uses_lt(g, 1));
  }
}

TEST_CASE("gemm policy: the SwiGLU epilogue except on small steps over a large gate_up", "[gemm][settings]") {
  CHECK(gemm_fuses_swiglu(1, 18432, 2560));  // 4B gate_up: every row count
  CHECK(gemm_fuses_swiglu(32, 18432, 2560));
  CHECK_FALSE(gemm_fuses_swiglu(1, 34816, 5120));  // 27B gate_up: above 8 rows only
  CHECK_FALSE(gemm_fuses_swiglu(kGemmSwigluSmallRows, 34816, 5120));
  CHECK(gemm_fuses_swiglu(kGemmSwigluSmallRows + 1, 34816, 5120));
  CHECK(gemm_fuses_swiglu(kGemmSwigluSmallRows, 1, kGemmSwigluSmallMaxWeights));
  CHECK_FALSE(gemm_fuses_swiglu(kGemmSwigluSmallRows, 1, kGemmSwigluSmallMaxWeights + 1));
  // The swiglu setting: auto is the rule, gemm always, kernel never.
  CHECK_FALSE(gemm_fuses_swiglu(SwigluMode::automatic, 1, 34816, 5120));
  CHECK(gemm_fuses_swiglu(SwigluMode::automatic, 1, 18432, 2560));
  CHECK(gemm_fuses_swiglu(SwigluMode::gemm, 1, 34816, 5120));
  CHECK_FALSE(gemm_fuses_swiglu(SwigluMode::kernel, 32, 18432, 2560));
  for (SwigluMode m : {SwigluMode::automatic, SwigluMode::gemm, SwigluMode::kernel}) {
    CHECK(parse_swiglu(swiglu_name(m)) == m);
  }
  CHECK_THROWS_AS(parse_swiglu("fused"), Error);
}

TEST_CASE("mix-round setting: names round-trip, the norm rounds only on decode-sized steps when asked", "[settings]") {
  for (MixRound m : {MixRound::automatic, MixRound::gemm, MixRound::norm, MixRound::partials, MixRound::residual}) {
    CHECK(parse_mix_round(mix_round_name(m)) == m);
  }
  CHECK_THROWS_WITH(parse_mix_round("f32"), "unknown mix-round 'f32' (valid: auto, gemm, norm, partials, residual)");
  // Only residual adds the product to the residual stream in the GEMM (cublasGemmEx, beta = 1).
  CHECK(mix_adds_in_gemm(MixRound::residual));
  for (MixRound m : {MixRound::automatic, MixRound::gemm, MixRound::norm, MixRound::partials}) {
    CHECK_FALSE(mix_adds_in_gemm(m));
  }
  CHECK_FALSE(mix_rounds_in_norm(MixRound::residual, 8));  // no f32 output
  CHECK_FALSE(mix_rounds_in_norm(MixRound::partials, 8));  // no f32 output: gemm's bf16 where it does not sum
  for (int64_t rows : {int64_t{1}, int64_t{8}, kGemmLtMaxRows}) {
    CHECK(mix_rounds_in_norm(MixRound::norm, rows));
    CHECK_FALSE(mix_rounds_in_norm(MixRound::gemm, rows));
    CHECK_FALSE(mix_rounds_in_norm(MixRound::automatic, rows));  // gemm until measured
  }
  CHECK_FALSE(mix_rounds_in_norm(MixRound::norm, kGemmLtMaxRows + 1));  // the f32 buffer's rows
  CHECK_FALSE(mix_rounds_in_norm(MixRound::norm, 32768));
}

TEST_CASE("mix-round partials: the norm sums a split GEMM's partials only where its 16-byte kernel can", "[settings]") {
  // The 4B's and 27B's hidden sizes in bf16.
  CHECK(mix_partials_shape(MixRound::partials, 2560, DType::bf16));
  CHECK(mix_partials_shape(MixRound::partials, 5120, DType::bf16));
  CHECK_FALSE(mix_partials_shape(MixRound::gemm, 2560, DType::bf16));
  CHECK_FALSE(mix_partials_shape(MixRound::norm, 2560, DType::bf16));
  CHECK_FALSE(mix_partials_shape(MixRound::automatic, 2560, DType::bf16));  // resolved before use
  CHECK_FALSE(mix_partials_shape(MixRound::partials, 2560, DType::f32));    // f32 rows: the strided kernel
  CHECK_FALSE(mix_partials_shape(MixRound::partials, 64, DType::bf16));     // the tiny preset: a warp a row
  CHECK_FALSE(mix_partials_shape(MixRound::partials, 512, DType::bf16));
  CHECK_FALSE(mix_partials_shape(MixRound::partials, 1000, DType::bf16));
  CHECK(mix_partials_shape(MixRound::partials, 768, DType::bf16));
  // residual is partials on the skinny kernel.
  CHECK(mix_partials_shape(MixRound::residual, 2560, DType::bf16));
  CHECK_FALSE(mix_partials_shape(MixRound::residual, 64, DType::bf16));
  CHECK(rmsnorm_sums_planes(8192));
  CHECK_FALSE(rmsnorm_sums_planes(8448));
}

TEST_CASE("gated-norm setting: names round-trip, auto fuses small steps of small heads", "[settings]") {
  for (GatedNormMode m : {GatedNormMode::automatic, GatedNormMode::delta, GatedNormMode::kernel}) {
    CHECK(parse_gated_norm(gated_norm_name(m)) == m);
  }
  CHECK_THROWS_WITH(parse_gated_norm("fused"), "unknown gated-norm 'fused' (valid: auto, delta, kernel)");
  for (int64_t rows : {1, 8, 32}) {
    CHECK(delta_fuses_gated_norm(GatedNormMode::delta, rows, 6144));
    CHECK_FALSE(delta_fuses_gated_norm(GatedNormMode::kernel, rows, 4096));
  }
  CHECK(delta_fuses_gated_norm(GatedNormMode::automatic, 1, 4096));  // 4B: Hv 32 x Dv 128
  CHECK(delta_fuses_gated_norm(GatedNormMode::automatic, kGatedNormFusedMaxRows, 4096));
  CHECK_FALSE(delta_fuses_gated_norm(GatedNormMode::automatic, kGatedNormFusedMaxRows + 1, 4096));
  CHECK_FALSE(delta_fuses_gated_norm(GatedNormMode::automatic, 1, 6144));  // 27B: Hv 48 x Dv 128
  // Prefill: only when asked for (not measured yet against the norm kernel).
  CHECK(prefill_fuses_gated_norm(GatedNormMode::delta));
  CHECK_FALSE(prefill_fuses_gated_norm(GatedNormMode::automatic));
  CHECK_FALSE(prefill_fuses_gated_norm(GatedNormMode::kernel));
}

TEST_CASE("ssm-state setting: names round-trip, anything else refused", "[settings]") {
  for (DType d : {DType::f32, DType::bf16}) CHECK(parse_ssm_state(ssm_state_name(d)) == d);
  CHECK(kSsmStateNames.front() == "f32");  // the default first
  CHECK_THROWS_WITH(parse_ssm_state("f16"), "unknown ssm-state 'f16' (valid: f32, bf16)");
  CHECK_THROWS_WITH(parse_ssm_state("auto"), "unknown ssm-state 'auto' (valid: f32, bf16)");
}

TEST_CASE("cuBLASLt shape keys: dims, strides, dtypes and each operand's alignment, and bad views refused",
          "[gemm][settings]") {
  // Views over made-up addresses: lt_shape reads no memory.
  auto at = [](uintptr_t a) { return reinterpret_cast<void*>(a); };
  TensorView x = TensorView::contiguous(at(0x10000), DType::bf16, {32, 2560});
  TensorView W = TensorView::contiguous(at(0x20000), DType::bf16, {18432, 2560});
  TensorView y = TensorView::contiguous(at(0x30040), DType::bf16, {32, 18432});
  y.stride[0] = 18440;
  const LtShape s = lt_shape(x, W, y);
  CHECK(s.M == 32);
  CHECK(s.N == 18432);
  CHECK(s.K == 2560);
  CHECK(s.ldx == 2560);
  CHECK(s.ldy == 18440);
  CHECK(s.align_x == 256);  // capped at 256
  CHECK(s.align_w == 256);
  CHECK(s.align_y == 64);
  CHECK(s.describe() == "M=32 N=18432 K=2560 bf16->bf16");
  // Another address with the same alignment is the same key; another alignment is not.
  TensorView x2 = TensorView::contiguous(at(0x50000), DType::bf16, {32, 2560});
  CHECK(lt_shape(x2, W, y) == s);
  TensorView x3 = TensorView::contiguous(at(0x10002), DType::bf16, {32, 2560});
  CHECK(lt_shape(x3, W, y).align_x == 2);
  CHECK_FALSE(lt_shape(x3, W, y) == s);
  TensorView yf = TensorView::contiguous(at(0x30000), DType::f32, {32, 18432});
  CHECK(lt_shape(x, W, yf).out == DType::f32);
  // The checks of gemm_xwt: mismatched K, a y of the wrong rows, mixed input dtypes, each named.
  const TensorView W2048 = TensorView::contiguous(at(0x20000), DType::bf16, {18432, 2048});
  const TensorView y31 = TensorView::contiguous(at(0x30000), DType::bf16, {31, 18432});
  test::expect_error([&] { lt_shape(x, W2048, y); }, {fmt::format("gemm: shapes do not match: x {} W {} y {}",
                                                                  x.describe(), W2048.describe(), y.describe())});
  test::expect_error([&] { lt_shape(x, W, y31); }, {fmt::format("gemm: shapes do not match: x {} W {} y {}",
                                                                x.describe(), W.describe(), y31.describe())});
  test::expect_error(
      [&] {
        lt_shape(x, TensorView::contiguous(at(0x20000), DType::f32, {18432, 2560}), y);
      },
      {"gemm: x (bf16) and W (f32) must share a dtype"});
}

TEST_CASE("gemm wgmma: resolved for bf16 on compute capability 9.0 only, refused elsewhere with the way out",
          "[gemm][settings]") {
  DeviceLimits h200, ampere, blackwell;
  h200.cc_major = 9, h200.cc_minor = 0;
  ampere = h200, ampere.cc_major = 8;
  blackwell = h200, blackwell.cc_major = 10;
  CHECK(resolve_gemm(GemmKind::wgmma, DType::bf16, h200) == GemmKind::wgmma);
  CHECK(resolve_gemm(GemmKind::wgmma_large, DType::bf16, h200) == GemmKind::wgmma_large);
  // auto: the own GEMM for large steps where it is built, mixed on other sm_90+, cuBLAS for f32.
  CHECK(resolve_gemm(GemmKind::automatic, DType::bf16, h200) == GemmKind::wgmma_large);
  CHECK(resolve_gemm(GemmKind::automatic, DType::bf16, blackwell) == GemmKind::mixed);
  CHECK(resolve_gemm(GemmKind::automatic, DType::bf16, ampere) == GemmKind::cublas);
  CHECK(resolve_gemm(GemmKind::automatic, DType::f32, h200) == GemmKind::cublas);
  for (auto [act, d] :
       {std::pair{DType::f32, h200}, std::pair{DType::bf16, ampere}, std::pair{DType::bf16, blackwell}}) {
    CAPTURE(dtype_name(act), d.cc_major);
    try {
      resolve_gemm(GemmKind::wgmma, act, d);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("compute capability 9.0") != std::string::npos);
    }
    try {
      resolve_gemm(GemmKind::wgmma_large, act, d);
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("compute capability 9.0") != std::string::npos);
      CHECK(std::string(e.what()).find("--gemm mixed or cublas") != std::string::npos);
    }
  }
}
