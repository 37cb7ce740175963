// The GEMM setting (models/step_settings.h): its names and which projections run the skinny
// kernel, cuBLASLt's tuned algorithm or cublasGemmEx.
#include "engine/error.h"
#include "models/step_settings.h"
#include "tests/support/catch.h"

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
    CHECK(std::string(e.what()).find("auto, cublas, skinny, mixed, lt") != std::string::npos);
  }
}

TEST_CASE("gemm policy: mixed runs skinny up to 24 rows and for the LM head, lt for the rest of decode",
          "[gemm][settings]") {
  // mixed: the skinny kernel up to kGemmMixedSkinnyRows rows, and for the LM head at any row count.
  CHECK(gemm_uses_skinny(GemmKind::mixed, 1, 2560));
  CHECK(gemm_uses_skinny(GemmKind::mixed, kGemmMixedSkinnyRows, 18432));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::mixed, kGemmMixedSkinnyRows + 1, 2560));
  CHECK(gemm_uses_skinny(GemmKind::mixed, 32, kGemmMixedWideN));
  CHECK(gemm_uses_skinny(GemmKind::mixed, 4096, 248320));
  // ... and cuBLASLt's tuned algorithm for the other decode projections, cublasGemmEx for prefill.
  CHECK(gemm_uses_lt(GemmKind::mixed, 32));
  CHECK_FALSE(gemm_uses_lt(GemmKind::mixed, kGemmLtMaxRows + 1));
  // lt: cuBLASLt up to kGemmLtMaxRows rows, never the skinny kernel.
  CHECK(gemm_uses_lt(GemmKind::lt, 1));
  CHECK(gemm_uses_lt(GemmKind::lt, kGemmLtMaxRows));
  CHECK_FALSE(gemm_uses_lt(GemmKind::lt, kGemmLtMaxRows + 1));
  CHECK_FALSE(gemm_uses_skinny(GemmKind::lt, 1, 2560));
  // skinny everywhere it applies; cublas never the others.
  CHECK(gemm_uses_skinny(GemmKind::skinny, 32, 2560));
  CHECK_FALSE(gemm_uses_lt(GemmKind::skinny, 32));
  for (GemmKind g : {GemmKind::cublas, GemmKind::automatic}) {
    CHECK_FALSE(gemm_uses_skinny(g, 1, 248320));
    CHECK_FALSE(gemm_uses_lt(g, 1));
  }
}
