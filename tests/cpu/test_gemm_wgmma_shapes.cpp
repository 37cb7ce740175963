// CPU tests of the wgmma GEMM's shape rules (kernels/gemm_wgmma_shapes.h): the model presets'
// prefill projections are taken at every row count, and every rule refuses on its own.
#include <cstdint>

#include "kernels/gemm_wgmma_shapes.h"
#include "models/qwen35_config.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("gemm_wgmma shapes: the presets' projections, and each rule refuses alone", "[gemm][gemm_wgmma]") {
  // The prefill projections of the 4B and the 27B (x W^T, W [N, K]): gate_up with the SwiGLU
  // epilogue (N = 2 intermediate), down, the GDN in_proj (q | k | v, z, a, b), attention's q (with
  // its gate), k and v, and the LM head (the vocabulary).
  for (const char* name : {"qwen3.5-4b", "qwen3.5-27b"}) {
    CAPTURE(name);
    const Qwen35Config c = preset(name);
    const int64_t H = c.hidden, I = c.intermediate;
    const int64_t in_proj = c.gdn.C() + static_cast<int64_t>(c.gdn.Hv) * c.gdn.Dv + 2 * c.gdn.Hv;
    for (int64_t M : {0, 1, 32, 4096, 32768}) {
      CAPTURE(M);
      CHECK(gemm_wgmma_supports(M, 2 * I, H, 8));
      CHECK(gemm_wgmma_supports(M, 2 * I, H, 0));
      CHECK(gemm_wgmma_supports(M, H, I, 0));
      CHECK(gemm_wgmma_supports(M, in_proj, H, 0));
      CHECK(gemm_wgmma_supports(M, 2LL * c.Hq * c.D, H, 0));
      CHECK(gemm_wgmma_supports(M, static_cast<int64_t>(c.Hkv) * c.D, H, 0));
      CHECK(gemm_wgmma_supports(M, c.vocab, H, 0));
    }
  }
  // The 4B's numbers: gate_up at 32 x 1024 rows, in_proj with no rows.
  CHECK(gemm_wgmma_supports(32768, 18432, 2560, 8));
  CHECK(gemm_wgmma_supports(0, 12352, 2560, 0));
  // The smallest shape, and the limits of each size.
  CHECK(gemm_wgmma_supports(1, 8, 8, 0));
  CHECK(gemm_wgmma_supports(1, 16, 8, 8));
  CHECK(gemm_wgmma_supports(INT32_MAX, 8, 8, 0));
  CHECK(gemm_wgmma_supports(1, INT32_MAX - 7, INT32_MAX - 7, 0));      // 2^31 - 8
  CHECK(gemm_wgmma_supports(1, INT32_MAX - 15, INT32_MAX - 7, 8));     // 2^31 - 16 with SwiGLU
  CHECK_FALSE(gemm_wgmma_supports(1, INT32_MAX - 7, 8, 8));            // 2^31 - 8: not a multiple of 16
  CHECK_FALSE(gemm_wgmma_supports(-1, 16, 8, 0));                      // M < 0
  CHECK_FALSE(gemm_wgmma_supports(int64_t{INT32_MAX} + 1, 16, 8, 0));  // M past int32
  CHECK_FALSE(gemm_wgmma_supports(1, 0, 8, 0));                        // N < 8
  CHECK_FALSE(gemm_wgmma_supports(1, -8, 8, 0));
  CHECK_FALSE(gemm_wgmma_supports(1, 12, 8, 0));  // N % 8
  CHECK_FALSE(gemm_wgmma_supports(1, 8, 8, 8));   // N % 16 with SwiGLU
  CHECK_FALSE(gemm_wgmma_supports(1, 24, 8, 8));
  CHECK_FALSE(gemm_wgmma_supports(1, int64_t{INT32_MAX} + 1, 8, 0));  // N past int32 (2^31, % 16 == 0)
  CHECK_FALSE(gemm_wgmma_supports(1, 16, 0, 0));                      // K < 8
  CHECK_FALSE(gemm_wgmma_supports(1, 16, 4, 0));
  CHECK_FALSE(gemm_wgmma_supports(1, 16, 12, 0));                      // K % 8
  CHECK_FALSE(gemm_wgmma_supports(1, 16, int64_t{INT32_MAX} + 1, 0));  // K past int32
  for (int group : {-8, 1, 4, 16}) {
    CAPTURE(group);
    CHECK_FALSE(gemm_wgmma_supports(1, 32, 8, group));  // the SwiGLU group is 0 or 8
  }
  // N and K over 0 .. 64: taken exactly where N and K are multiples of 8 from 8 on (N of 16 with
  // SwiGLU).
  for (int64_t N = 0; N <= 64; ++N) {
    for (int64_t K = 0; K <= 64; ++K) {
      CAPTURE(N, K);
      const bool k_ok = K >= 8 && K % 8 == 0;
      CHECK(gemm_wgmma_supports(3, N, K, 0) == (N >= 8 && N % 8 == 0 && k_ok));
      CHECK(gemm_wgmma_supports(3, N, K, 8) == (N >= 16 && N % 16 == 0 && k_ok));
    }
  }
}
