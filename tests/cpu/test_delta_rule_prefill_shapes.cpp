// CPU tests of the delta-rule prefill forms' shape logic (kernels/delta_rule_prefill_shapes.h): the
// shapes each form is built for, the automatic Dv tile, the dynamic shared memory of each form's
// blocks (the bytes the model plans with; each kernel static_asserts its layout against them), the
// two-kernel form's records and workspace, and what the model presets get.
#include <cstddef>

#include "kernels/contracts.h"
#include "kernels/delta_rule_prefill_shapes.h"
#include "models/qwen35_config.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

constexpr size_t kSm90Smem = 227 * 1024;  // a block's shared memory on compute capability 9.0
constexpr int kTiles[] = {32, 64, 128};

}  // namespace

TEST_CASE("delta-rule prefill shapes: the scan takes the decode kernel's shapes", "[delta_rule][delta_prefill]") {
  for (int Dk = -1; Dk <= 300; ++Dk) {
    for (int Dv : {-1, 0, 1, 8, 22, 24, 96, 128, 129, 256, 257, 512}) {
      CAPTURE(Dk, Dv);
      CHECK(delta_rule_prefill_supports(Dk, Dv) == (delta_rule_decode_split(Dk, Dv) != 0));
      const bool dk_built = Dk == 8 || Dk == 16 || Dk == 32 || Dk == 64 || Dk == 128;
      CHECK(delta_rule_prefill_supports(Dk, Dv) == (dk_built && Dv >= 1 && Dv <= 256));
    }
  }
  CHECK(delta_rule_prefill_supports(128, 128));
  CHECK(delta_rule_prefill_supports(8, 256));
  CHECK_FALSE(delta_rule_prefill_supports(128, 257));  // no split fits 257 columns in its thread bound
  CHECK_FALSE(delta_rule_prefill_supports(48, 64));
  CHECK_FALSE(delta_rule_prefill_supports(256, 128));
  CHECK_FALSE(delta_rule_prefill_supports(128, 0));
}

TEST_CASE("delta-rule prefill shapes: the chunked and mma forms, their Dv tiles and shared memory",
          "[delta_rule][delta_prefill]") {
  for (int Dk = -1; Dk <= 300; ++Dk) {
    for (int Dv : {-1, 0, 1, 22, 40, 96, 128, 300}) {
      CAPTURE(Dk, Dv);
      const bool built = (Dk == 32 || Dk == 64 || Dk == 128) && Dv >= 1;
      CHECK(delta_rule_prefill_chunked_supports(Dk, Dv) == built);
      CHECK(delta_rule_prefill_mma_supports(Dk, Dv) == built);  // the same shapes
    }
  }
  CHECK(delta_rule_prefill_chunked_supports(128, 128));
  CHECK(delta_rule_prefill_chunked_supports(64, 96));
  CHECK(delta_rule_prefill_chunked_supports(32, 40));
  CHECK_FALSE(delta_rule_prefill_chunked_supports(48, 64));
  CHECK_FALSE(delta_rule_prefill_chunked_supports(256, 128));
  CHECK_FALSE(delta_rule_prefill_chunked_supports(128, 0));
  // The automatic Dv tile: the widest of 128, 64 that divides Dv, else 32 (tiles past Dv masked).
  for (int Dv : {128, 256, 384}) CHECK(delta_rule_prefill_chunked_tile(Dv) == 128);
  for (int Dv : {64, 192, 320}) CHECK(delta_rule_prefill_chunked_tile(Dv) == 64);
  for (int Dv : {1, 22, 32, 40, 96, 100}) CHECK(delta_rule_prefill_chunked_tile(Dv) == 32);
  for (int Dv = 1; Dv <= 512; ++Dv) {
    CAPTURE(Dv);
    CHECK(delta_rule_prefill_mma_tile(Dv) == delta_rule_prefill_chunked_tile(Dv));
  }

  // Shared memory a block, 64-token chunks; the chunked form: G (double), S [Dk, BV], k [64, Dk + 4],
  // q' / V' [64, max(Dk, BV)], v [64, BV], T and P [64, 68], 3 x 64 floats.
  CHECK(delta_rule_prefill_chunked_smem(128, 128) == 200960);
  CHECK(delta_rule_prefill_chunked_smem(128, 64) == 151808);
  CHECK(delta_rule_prefill_chunked_smem(128, 32) == 127232);
  CHECK(delta_rule_prefill_chunked_smem(64, 64) == 102656);
  CHECK(delta_rule_prefill_chunked_smem(32, 128) == 127232);
  CHECK(delta_rule_prefill_chunked_smem(32, 32) == 65792);
  // The mma form: bf16 q, k tiles for bf16 inputs (and X / V' as two bf16 part tiles), f32 else.
  CHECK(delta_rule_prefill_mma_smem(128, 128, DType::bf16) == 226560);
  CHECK(delta_rule_prefill_mma_smem(128, 128, DType::f32) == 210176);
  CHECK(delta_rule_prefill_mma_smem(128, 64, DType::bf16) == 144128);
  CHECK(delta_rule_prefill_mma_smem(64, 64, DType::bf16) == 118528);
  CHECK(delta_rule_prefill_mma_smem(64, 64, DType::f32) == 110336);
  CHECK(delta_rule_prefill_mma_smem(32, 64, DType::bf16) == 105728);
  CHECK(delta_rule_prefill_mma_smem(32, 32, DType::f32) == 72704);
  // Every built (Dk, tile) fits a block on compute capability 9.0; nothing else has a size.
  for (int Dk = -1; Dk <= 300; ++Dk) {
    for (int tile = -1; tile <= 300; ++tile) {
      const bool built = (Dk == 32 || Dk == 64 || Dk == 128) && (tile == 32 || tile == 64 || tile == 128);
      if (built) {
        CAPTURE(Dk, tile);
        CHECK(delta_rule_prefill_chunked_smem(Dk, tile) > 0);
        CHECK(delta_rule_prefill_chunked_smem(Dk, tile) <= kSm90Smem);
        CHECK(delta_rule_prefill_mma_smem(Dk, tile, DType::bf16) > 0);
        CHECK(delta_rule_prefill_mma_smem(Dk, tile, DType::bf16) <= kSm90Smem);
        CHECK(delta_rule_prefill_mma_smem(Dk, tile, DType::f32) > 0);
        CHECK(delta_rule_prefill_mma_smem(Dk, tile, DType::f32) <= kSm90Smem);
      } else if (delta_rule_prefill_chunked_smem(Dk, tile) != 0 ||
                 delta_rule_prefill_mma_smem(Dk, tile, DType::bf16) != 0 ||
                 delta_rule_prefill_mma_smem(Dk, tile, DType::f32) != 0) {
        CAPTURE(Dk, tile);
        FAIL("a size for a (Dk, Dv tile) that is not built");
      }
    }
  }
  // Wider tiles and keys take more.
  for (int Dk : {32, 64, 128}) {
    CAPTURE(Dk);
    CHECK(delta_rule_prefill_chunked_smem(Dk, 32) < delta_rule_prefill_chunked_smem(Dk, 64));
    CHECK(delta_rule_prefill_chunked_smem(Dk, 64) < delta_rule_prefill_chunked_smem(Dk, 128));
    CHECK(delta_rule_prefill_mma_smem(Dk, 32, DType::bf16) < delta_rule_prefill_mma_smem(Dk, 64, DType::bf16));
    CHECK(delta_rule_prefill_mma_smem(Dk, 64, DType::bf16) < delta_rule_prefill_mma_smem(Dk, 128, DType::bf16));
  }
  for (int tile : kTiles) {
    CAPTURE(tile);
    CHECK(delta_rule_prefill_chunked_smem(32, tile) < delta_rule_prefill_chunked_smem(64, tile));
    CHECK(delta_rule_prefill_chunked_smem(64, tile) < delta_rule_prefill_chunked_smem(128, tile));
  }
  CHECK(delta_rule_prefill_chunked_smem(48, 64) == 0);
  CHECK(delta_rule_prefill_chunked_smem(128, 16) == 0);
  CHECK(delta_rule_prefill_chunked_smem(128, 0) == 0);  // 0 is no tile here (the launcher's automatic)
  CHECK(delta_rule_prefill_mma_smem(48, 64, DType::bf16) == 0);
  CHECK(delta_rule_prefill_mma_smem(128, 16, DType::f32) == 0);
}

TEST_CASE("delta-rule prefill shapes: the mma form's fused norm is built for bf16 and Dv 64 or 128 in one tile",
          "[delta_rule][delta_prefill]") {
  CHECK(delta_rule_prefill_mma_norm_built(128, DType::bf16, DType::bf16));
  CHECK(delta_rule_prefill_mma_norm_built(64, DType::bf16, DType::bf16));
  CHECK(delta_rule_prefill_mma_norm_built(128, DType::bf16, DType::bf16, 128));
  CHECK(delta_rule_prefill_mma_norm_built(64, DType::bf16, DType::bf16, 64));
  CHECK_FALSE(delta_rule_prefill_mma_norm_built(128, DType::bf16, DType::bf16, 64));  // two Dv tiles
  CHECK_FALSE(delta_rule_prefill_mma_norm_built(128, DType::bf16, DType::bf16, 32));
  CHECK_FALSE(delta_rule_prefill_mma_norm_built(64, DType::bf16, DType::bf16, 128));  // a tile wider than Dv
  CHECK_FALSE(delta_rule_prefill_mma_norm_built(128, DType::f32, DType::bf16));
  CHECK_FALSE(delta_rule_prefill_mma_norm_built(128, DType::bf16, DType::f32));
  for (int Dv = 0; Dv <= 300; ++Dv) {
    CAPTURE(Dv);
    CHECK(delta_rule_prefill_mma_norm_built(Dv, DType::bf16, DType::bf16) == (Dv == 64 || Dv == 128));
  }
}

TEST_CASE("delta-rule prefill shapes: the wgmma forms, their shared memory and the two-kernel form's workspace",
          "[delta_rule][delta_prefill]") {
  for (int Dk : {-1, 0, 32, 64, 127, 128, 129, 256}) {
    for (int Dv : {-1, 0, 32, 64, 127, 128, 129, 256}) {
      CAPTURE(Dk, Dv);
      CHECK(delta_rule_prefill_wgmma_supports(Dk, Dv, DType::bf16) == (Dk == 128 && Dv == 128));
      CHECK_FALSE(delta_rule_prefill_wgmma_supports(Dk, Dv, DType::f32));
    }
  }
  CHECK_FALSE(delta_rule_prefill_wgmma_supports(128, 128, DType::f16));
  // sm_90a code: compute capability 9.0 exactly.
  CHECK(delta_rule_prefill_wgmma_device(9, 0));
  CHECK_FALSE(delta_rule_prefill_wgmma_device(9, 1));
  CHECK_FALSE(delta_rule_prefill_wgmma_device(10, 0));
  CHECK_FALSE(delta_rule_prefill_wgmma_device(8, 0));
  CHECK_FALSE(delta_rule_prefill_wgmma_device(8, 9));
  // One block of the one-kernel form: q, v, two k tiles (4 x 16 KB), S parts (64 KB), X / V' parts
  // (32 KB), two A / T tiles (2 x 17,408), two chunks' gates (2 x 1,280), 1 KB of first non-finite rows.
  CHECK(delta_rule_prefill_wgmma_smem() == 202240);
  CHECK(delta_rule_prefill_wgmma_smem() <= kSm90Smem);
  // The two-kernel form: a recurrence block holds two stages of q, k, v, T's and P's parts and the
  // gates (2 x 83,200) and two output tiles (2 x 8 KB).
  CHECK(delta_rule_prefill_wgmma_t_smem() == 182784);
  CHECK(delta_rule_prefill_wgmma_t_smem() <= kSm90Smem);
  // A record: the lower triangles (36 core matrices of 128 bytes) of 4 part tiles, then the gates.
  CHECK(delta_rule_prefill_wgmma_t_record() == 4 * 36 * 128 + 64 * 8 + 3 * 64 * 4);
  CHECK(delta_rule_prefill_wgmma_t_record() == 19712);
  // ceil(max_tokens / 64) + max_seqs records a v-head.
  CHECK(delta_rule_prefill_wgmma_t_workspace(1024, 32, 32) == (16 + 32) * 32 * delta_rule_prefill_wgmma_t_record());
  CHECK(delta_rule_prefill_wgmma_t_workspace(65, 1, 2) == (2 + 1) * 2 * 19712);
  CHECK(delta_rule_prefill_wgmma_t_workspace(0, 0, 32) == 0);
  CHECK(delta_rule_prefill_wgmma_t_workspace(0, 3, 1) == 3 * 19712);
  CHECK(delta_rule_prefill_wgmma_t_workspace(-1, 2, 32) == 0);
  CHECK(delta_rule_prefill_wgmma_t_workspace(64, -1, 32) == 0);
  CHECK(delta_rule_prefill_wgmma_t_workspace(64, 2, -1) == 0);
  // A T block: two v-heads where each k head has an even number of them (52.5 KB, four blocks an
  // SM), else one (35 KB, six).
  CHECK(delta_rule_prefill_wgmma_t_chunk_heads(16, 32) == 2);
  CHECK(delta_rule_prefill_wgmma_t_chunk_heads(1, 2) == 2);
  CHECK(delta_rule_prefill_wgmma_t_chunk_heads(16, 48) == 1);
  CHECK(delta_rule_prefill_wgmma_t_chunk_heads(1, 3) == 1);
  CHECK(delta_rule_prefill_wgmma_t_chunk_heads(2, 2) == 1);
  CHECK(delta_rule_prefill_wgmma_t_chunk_heads(0, 2) == 1);
  CHECK(delta_rule_prefill_wgmma_t_chunk_smem(1, 3) == 35072);
  CHECK(delta_rule_prefill_wgmma_t_chunk_smem(16, 32) == 53760);
  for (int Hk = 1; Hk <= 16; ++Hk) {
    for (int r = 1; r <= 6; ++r) {
      CAPTURE(Hk, r);
      const int heads = delta_rule_prefill_wgmma_t_chunk_heads(Hk, Hk * r);
      CHECK(heads == (r % 2 == 0 ? 2 : 1));
      CHECK(delta_rule_prefill_wgmma_t_chunk_smem(Hk, Hk * r) == (heads == 2 ? 53760u : 35072u));
    }
  }
}

TEST_CASE("delta-rule prefill shapes: the forms and sizes the model presets get", "[delta_rule][delta_prefill]") {
  // 4B and 27B: Dk = Dv = 128, every form; 16 k heads, 32 v-heads (4B) and 48 (27B).
  for (const char* name : {"qwen3.5-4b", "qwen3.5-27b"}) {
    CAPTURE(name);
    const GdnDims g = preset(name).gdn;
    REQUIRE(g.Dk == 128);
    REQUIRE(g.Dv == 128);
    CHECK(delta_rule_prefill_supports(g.Dk, g.Dv));
    CHECK(delta_rule_prefill_chunked_supports(g.Dk, g.Dv));
    CHECK(delta_rule_prefill_mma_supports(g.Dk, g.Dv));
    CHECK(delta_rule_prefill_wgmma_supports(g.Dk, g.Dv, DType::bf16));
    CHECK_FALSE(delta_rule_prefill_wgmma_supports(g.Dk, g.Dv, DType::f32));  // f32 steps: chunked or mma
    CHECK(delta_rule_prefill_mma_tile(g.Dv) == 128);
    CHECK(delta_rule_prefill_chunked_smem(g.Dk, delta_rule_prefill_chunked_tile(g.Dv)) == 200960);
    CHECK(delta_rule_prefill_mma_smem(g.Dk, delta_rule_prefill_mma_tile(g.Dv), DType::bf16) == 226560);
    CHECK(delta_rule_prefill_mma_norm_built(g.Dv, DType::bf16, DType::bf16));
  }
  const GdnDims b4 = preset("qwen3.5-4b").gdn, b27 = preset("qwen3.5-27b").gdn;
  CHECK(delta_rule_prefill_wgmma_t_chunk_heads(b4.Hk, b4.Hv) == 2);
  CHECK(delta_rule_prefill_wgmma_t_chunk_smem(b4.Hk, b4.Hv) == 53760);
  CHECK(delta_rule_prefill_wgmma_t_chunk_heads(b27.Hk, b27.Hv) == 1);
  CHECK(delta_rule_prefill_wgmma_t_chunk_smem(b27.Hk, b27.Hv) == 35072);
  // The 4B's prefill of 32 x 1024 tokens: (512 + 32) records for each of its 32 v-heads.
  CHECK(delta_rule_prefill_wgmma_t_workspace(32 * 1024, 32, b4.Hv) == size_t{544} * 32 * 19712);
  // The test presets: Dk = 32 (chunked and mma, no wgmma form), Dv 32 and 64.
  const GdnDims tiny = preset("tiny").gdn, dkdv = preset("tiny-dkdv").gdn;
  CHECK(delta_rule_prefill_mma_supports(tiny.Dk, tiny.Dv));
  CHECK_FALSE(delta_rule_prefill_wgmma_supports(tiny.Dk, tiny.Dv, DType::bf16));
  CHECK(delta_rule_prefill_mma_tile(tiny.Dv) == 32);
  CHECK(delta_rule_prefill_mma_smem(tiny.Dk, 32, DType::bf16) == 76800);
  CHECK_FALSE(delta_rule_prefill_mma_norm_built(tiny.Dv, DType::bf16, DType::bf16));
  CHECK(delta_rule_prefill_mma_supports(dkdv.Dk, dkdv.Dv));
  CHECK_FALSE(delta_rule_prefill_wgmma_supports(dkdv.Dk, dkdv.Dv, DType::bf16));
  CHECK(delta_rule_prefill_mma_tile(dkdv.Dv) == 64);
  CHECK(delta_rule_prefill_mma_smem(dkdv.Dk, 64, DType::bf16) == 105728);
  CHECK(delta_rule_prefill_mma_norm_built(dkdv.Dv, DType::bf16, DType::bf16));
  CHECK(delta_rule_prefill_wgmma_t_chunk_heads(dkdv.Hk, dkdv.Hv) == 1);  // Hv / Hk = 3
}
