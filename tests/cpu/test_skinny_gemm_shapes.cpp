// CPU tests of the skinny GEMM's shape logic (kernels/skinny_gemm_shapes.h): the shapes it takes,
// the W rows a block and the split of K the model launches it with, the workspace of a split.
#include <algorithm>

#include "kernels/skinny_gemm_shapes.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("skinny gemm shapes: what it takes, its block rows, its split and its workspace", "[gemm][skinny]") {
  CHECK(skinny_gemm_supports(1, 1, 64));
  CHECK(skinny_gemm_supports(32, 12352, 2560));
  CHECK_FALSE(skinny_gemm_supports(33, 64, 64));
  CHECK_FALSE(skinny_gemm_supports(0, 64, 64));
  CHECK_FALSE(skinny_gemm_supports(8, 64, 100));
  CHECK_FALSE(skinny_gemm_supports(8, 64, 32));
  for (int N : {64, 2560, 12352, 18432, 248320}) {
    for (int K : {64, 2560, 4096, 9216}) {
      for (int M : {1, 16, 17, 32}) {
        const int s = skinny_gemm_pick_splits(M, N, K, 132);
        CHECK(s >= 1);
        CHECK(s <= std::max(1, std::min(32, K / 256)));
      }
    }
  }
  CHECK(skinny_gemm_pick_splits(8, 18432, 2560, 132) == 1);  // 288 row blocks fill 132 SMs: no split
  CHECK(skinny_gemm_pick_splits(8, 2560, 4096, 132) > 1);    // 40 row blocks: split K
  // Wider row blocks above 16 rows for wide weights (the x tile re-read less often).
  CHECK(skinny_gemm_block_rows(16, 18432, 132) == 64);
  CHECK(skinny_gemm_block_rows(17, 18432, 132) == 256);  // 72 blocks
  CHECK(skinny_gemm_block_rows(32, 33792, 132) == 256);  // 132 blocks
  // 136 blocks of 256 and 272 of 128 would need two waves: 128 of 272 rows take it in one.
  CHECK(skinny_gemm_block_rows(32, 34816, 132) == kSkinnyGemmOneWaveRows);
  CHECK(skinny_gemm_block_rows(16, 34816, 132) == kSkinnyGemmNarrowRows);
  CHECK(skinny_gemm_block_rows(32, 35904, 132) == kSkinnyGemmOneWaveRows);  // 132 blocks
  CHECK(skinny_gemm_block_rows(32, 35905, 132) == kSkinnyGemmNarrowRows);   // 133: two waves again
  CHECK(skinny_gemm_pick_splits(32, 34816, 5120, 132) == 1);
  CHECK(skinny_gemm_block_rows(32, 12352, 132) == 128);  // 49 blocks of 256 are too few: 97 of 128
  CHECK(skinny_gemm_block_rows(32, 10240, 132) == 128);
  CHECK(skinny_gemm_block_rows(32, 8192, 132) == 64);  // 64 blocks of 128: too few
  CHECK(skinny_gemm_block_rows(32, 2560, 132) == 64);
  CHECK(skinny_gemm_pick_splits(32, 18432, 2560, 132) == 1);  // 72 row blocks of 256: no split
  CHECK(skinny_gemm_workspace_bytes(32, 2560, 1) == 0);
  CHECK(skinny_gemm_workspace_bytes(32, 2560, 6) == 6u * 32 * 2560 * 4);
  CHECK(skinny_gemm_workspace_bytes(0, 2560, 6) == 0);
  // Over many shapes and SM counts: the block rows are one of the launcher's, a wide block is
  // picked only where its row blocks fill half a wave to one wave (one 256- or 272-row block an SM,
  // two of 128), and a wide block is never split.
  for (int sms : {1, 66, 114, 132}) {
    for (int N = 64; N <= 300000; N = N * 5 / 4 + 64) {
      for (int M : {1, 8, 16, 17, 24, 32}) {
        const int bn = skinny_gemm_block_rows(M, N, sms);
        CHECK((bn == kSkinnyGemmNarrowRows || bn == 128 || bn == 256 || bn == kSkinnyGemmOneWaveRows));
        // 272 rows only where neither 256 nor 128 fills one wave.
        if (bn == kSkinnyGemmOneWaveRows) CHECK(N > 256L * sms);
        if (M <= 16) CHECK(bn == kSkinnyGemmNarrowRows);
        const long blocks = (N + bn - 1) / bn, per_sm = bn == 128 ? 2 : 1;
        if (bn > kSkinnyGemmNarrowRows) {
          CHECK(2 * blocks >= sms);
          CHECK(blocks <= per_sm * sms);
          CHECK(skinny_gemm_pick_splits(M, N, 2560, sms) == 1);
        }
      }
    }
  }
}
