// CPU tests of the head-size logic the GPU step depends on, so it is covered on every machine:
// - attention: which D has a tuned kernel (32, 64, 128, 256), which shapes launch at all (any D in
//   1..256 through the generic kernel), the split-K workspace size, the kernels the presets get;
// - the delta rule's column split with the Dk = 8 tiles (Q = 1 and 4, like Dk = 16);
// - every Hugging Face fixture (tests/fixtures) is accepted by the GPU step's checks and contracts:
//   attention, rotary dims attn_prep takes, the delta rule (decode and scan prefill), postconv on
//   every arm, conv.fwd, and the fused GDN arms falling back to unfused with a reason.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/attention_shapes.h"
#include "kernels/contracts.h"
#include "models/hf_config.h"
#include "models/qwen35_config.h"
#include "tests/support/catch.h"

using namespace sg;

TEST_CASE("attention head sizes: tuned for 32, 64, 128, 256, generic for the rest of 1..256",
          "[attention][contracts]") {
  for (int D = -1; D <= 300; ++D) {
    CAPTURE(D);
    const bool tuned = D == 32 || D == 64 || D == 128 || D == 256;
    CHECK(attention_tuned_head_dim(D) == tuned);
    const bool in_range = D >= 1 && D <= kAttentionMaxD;
    CHECK(attention_supports(4, 2, D) == in_range);
    CHECK(attention_supports(4, 2, D, DType::f32) == in_range);
    CHECK_FALSE(attention_supports(4, 2, D, DType::f16));
    CHECK_FALSE(attention_supports(4, 2, D, DType::i32));
    // The tensor-core prefill: the tuned head sizes, bf16 q and cache only.
    CHECK(attention_prefill_mma_supports(D, DType::bf16, DType::bf16) == tuned);
    CHECK_FALSE(attention_prefill_mma_supports(D, DType::f32, DType::bf16));
    CHECK_FALSE(attention_prefill_mma_supports(D, DType::bf16, DType::f32));
    CHECK((attention_prefill_mma_smem(D) > 0) == tuned);
  }
  // 64 query rows + two K and two V tiles of 64 keys (32 at D = 256), rows of D + 8 bf16, 512 bytes
  // of metadata; with one K and one V tile (what the model plans with, the least the kernel needs).
  CHECK(attention_prefill_mma_smem(256) == 101888);
  CHECK(attention_prefill_mma_smem(128) == 87552);
  CHECK(attention_prefill_mma_smem(64) == 46592);
  CHECK(attention_prefill_mma_smem(32) == 26112);
  CHECK(attention_prefill_mma_smem(256, 1) == 68096);
  CHECK(attention_prefill_mma_smem(128, 1) == 52736);
  CHECK(attention_prefill_mma_smem(64, 1) == 28160);
  CHECK(attention_prefill_mma_smem(32, 1) == 15872);
  CHECK(attention_prefill_mma_smem(256, 0) == 0);
  CHECK(attention_prefill_mma_smem(256, 3) == 0);
  // Compute capability 8.6 / 8.9 allow 101,376 bytes a block: D = 256 runs there with one buffer.
  CHECK(attention_prefill_mma_smem(256, 2) > 101376);
  CHECK(attention_prefill_mma_smem(256, 1) <= 101376);
  // The wgmma prefill: D 64, 128, 256, bf16 only; two query tiles of 64 rows and two stages of K, V
  // tiles of 64 keys (bf16, unpadded), and 1024 bytes to align them; within the H200's 227 KB.
  for (int D = -1; D <= 300; ++D) {
    CAPTURE(D);
    const bool built = D == 64 || D == 128 || D == 256;
    CHECK(attention_prefill_wgmma_supports(D, DType::bf16, DType::bf16) == built);
    CHECK_FALSE(attention_prefill_wgmma_supports(D, DType::f32, DType::bf16));
    CHECK_FALSE(attention_prefill_wgmma_supports(D, DType::bf16, DType::f32));
    CHECK((attention_prefill_wgmma_smem(D) > 0) == built);
  }
  CHECK(attention_prefill_wgmma_smem(256) == 197632);
  CHECK(attention_prefill_wgmma_smem(128) == 99328);
  CHECK(attention_prefill_wgmma_smem(64) == 50176);
  CHECK(attention_prefill_wgmma_smem(256) <= 232448);
  CHECK(attention_prefill_wgmma_device(9, 0));  // sm_90a code runs on compute capability 9.0 only
  CHECK_FALSE(attention_prefill_wgmma_device(8, 0));
  CHECK_FALSE(attention_prefill_wgmma_device(10, 0));
  // GQA: Hq a positive multiple of Hkv.
  CHECK(attention_supports(6, 2, 16));
  CHECK(attention_supports(2, 1, 24, DType::f32));
  CHECK_FALSE(attention_supports(6, 4, 16));
  CHECK_FALSE(attention_supports(0, 1, 16));
  CHECK_FALSE(attention_supports(2, 0, 16));
  CHECK_FALSE(attention_supports(-2, -1, 16));
}

TEST_CASE("attention decode mma: shapes, shared memory and the split pick", "[attention][contracts]") {
  for (int D = -1; D <= 300; ++D) {
    CAPTURE(D);
    const bool built = D == 64 || D == 128 || D == 256;
    CHECK(attention_decode_mma_supports(16, 4, D, DType::bf16, DType::bf16) == built);
    CHECK((attention_decode_mma_smem(D) > 0) == built);
  }
  // At most 8 query heads per kv head (the n of one mma tile); bf16 q and cache only.
  CHECK(attention_decode_mma_supports(8, 1, 256, DType::bf16, DType::bf16));
  CHECK(attention_decode_mma_supports(24, 4, 256, DType::bf16, DType::bf16));
  CHECK_FALSE(attention_decode_mma_supports(9, 1, 256, DType::bf16, DType::bf16));
  CHECK_FALSE(attention_decode_mma_supports(16, 1, 128, DType::bf16, DType::bf16));
  CHECK_FALSE(attention_decode_mma_supports(16, 4, 256, DType::f32, DType::bf16));
  CHECK_FALSE(attention_decode_mma_supports(16, 4, 256, DType::bf16, DType::f32));
  CHECK_FALSE(attention_decode_mma_supports(16, 3, 256, DType::bf16, DType::bf16));
  CHECK_FALSE(attention_decode_mma_supports(32, 2, 256, DType::bf16, DType::bf16));  // 16 q heads per kv head
  CHECK_FALSE(attention_decode_mma_supports(4, 2, 32, DType::bf16, DType::bf16));    // D 32: prefill only
  CHECK_FALSE(attention_decode_mma_supports(16, 4, 257, DType::bf16, DType::bf16));
  CHECK_FALSE(attention_decode_mma_supports(16, 0, 256, DType::bf16, DType::bf16));
  // 4 warps x 3 stages x (K + V) x 16 keys x D bf16.
  CHECK(attention_decode_mma_smem(256) == 196608);
  CHECK(attention_decode_mma_smem(128) == 98304);
  CHECK(attention_decode_mma_smem(64) == 49152);
  // Blocks an SM holds (228 KB of shared memory, 1 KB reserved a block): what the split pick is given.
  CHECK(attention_decode_mma_blocks_per_sm(256) == 1);
  CHECK(attention_decode_mma_blocks_per_sm(128) == 2);
  CHECK(attention_decode_mma_blocks_per_sm(64) == 4);
  CHECK(attention_decode_mma_blocks_per_sm(32) == 0);
  CHECK(attention_decode_mma_blocks_per_sm(0) == 0);
  // The split pick on the H200 (132 SMs), 4B shapes (Hkv 4), one block per SM at D = 256.
  CHECK(attention_decode_mma_pick_splits(32, 4, 1152, 132, 1) == 1);  // 128 blocks: one wave
  CHECK(attention_decode_mma_pick_splits(16, 4, 1152, 132, 1) == 2);  // 128 blocks
  CHECK(attention_decode_mma_pick_splits(8, 4, 1152, 132, 1) == 4);   // 128 blocks
  CHECK(attention_decode_mma_pick_splits(24, 4, 1152, 132, 1) == 4);  // 384 blocks, 2.9 waves
  CHECK(attention_decode_mma_pick_splits(1, 4, 1152, 132, 1) == 17);  // near the cap of 64 positions per split
  CHECK(attention_decode_mma_pick_splits(1, 4, 100, 132, 1) == 1);
  CHECK(attention_decode_mma_pick_splits(0, 4, 1152, 132, 1) == 1);
  CHECK(attention_decode_mma_pick_splits(1, 0, 1152, 132, 1) == 1);
  CHECK(attention_decode_mma_pick_splits(1, 4, 1152, 0, 0) == 1);  // one SM: a split only adds blocks
  for (int T = 1; T <= 64; ++T) {
    for (int ctx : {1, 63, 64, 1024, 8192, 1 << 20}) {
      const int s = attention_decode_mma_pick_splits(T, 4, ctx, 132, 1);
      CHECK(s >= 1);
      CHECK(s <= std::max(1, std::min(64, ctx / 64)));
    }
  }
}

TEST_CASE("attention decode (CUDA-core kernels): the split pick fills the SMs four times within the context",
          "[attention][contracts]") {
  // 4B and 27B at D 256 (16 or 24 q heads, 4 kv heads: one block of 8 heads a kv head), 132 SMs,
  // context 1024: 528 blocks wanted, 64 positions a split at least (16 splits).
  CHECK(attention_decode_pick_splits(32, 16, 4, 1024, 132) == 5);  // 128 blocks a split
  CHECK(attention_decode_pick_splits(32, 24, 4, 1024, 132) == 5);
  CHECK(attention_decode_pick_splits(8, 16, 4, 1024, 132) == 16);  // 32 blocks: 17 wanted, 16 allowed
  CHECK(attention_decode_pick_splits(1, 16, 4, 1024, 132) == 16);
  CHECK(attention_decode_pick_splits(1, 16, 4, 1 << 20, 132) == 32);  // at most 32
  CHECK(attention_decode_pick_splits(33, 16, 4, 1024, 132) == 4);     // 132 blocks a split
  CHECK(attention_decode_pick_splits(132, 16, 4, 1024, 132) == 1);    // 528 blocks already
  // 16 q heads a kv head: two blocks a kv head (chunks of kAttentionDecodeMaxGroup).
  CHECK(kAttentionDecodeMaxGroup == 8);
  CHECK(attention_decode_pick_splits(32, 16, 1, 1024, 132) == 9);  // 64 blocks a split
  CHECK(attention_decode_pick_splits(32, 9, 1, 1024, 132) == 9);   // 9 heads: two blocks too
  CHECK(attention_decode_pick_splits(32, 8, 1, 1024, 132) == 16);  // one block: 17 wanted
  // Short contexts, empty shapes, no SM count.
  CHECK(attention_decode_pick_splits(1, 16, 4, 100, 132) == 1);
  CHECK(attention_decode_pick_splits(1, 16, 4, 63, 132) == 1);
  CHECK(attention_decode_pick_splits(1, 16, 4, 128, 132) == 2);
  CHECK(attention_decode_pick_splits(0, 16, 4, 1024, 132) == 1);
  CHECK(attention_decode_pick_splits(1, 0, 4, 1024, 132) == 1);
  CHECK(attention_decode_pick_splits(1, 16, 0, 1024, 132) == 1);
  CHECK(attention_decode_pick_splits(4, 16, 4, 1024, 0) == 1);  // one SM: 4 blocks wanted, 16 there
  for (int T = 1; T <= 300; T += 7) {
    for (int ctx : {1, 63, 64, 1024, 8192, 1 << 20}) {
      for (int sms : {1, 78, 132}) {
        CAPTURE(T, ctx, sms);
        const int s = attention_decode_pick_splits(T, 16, 4, ctx, sms);
        CHECK(s >= 1);
        CHECK(s <= std::min(32, std::max(1, ctx / 64)));
        // Fewer splits would leave the four waves unfilled, unless the context or the cap stops it.
        if (s > 1 && s < std::min(32, ctx / 64)) CHECK(static_cast<long>(T) * 4 * (s - 1) < 4L * sms);
        if (s < std::min(32, std::max(1, ctx / 64))) CHECK(static_cast<long>(T) * 4 * s >= 4L * sms);
      }
    }
  }
}

TEST_CASE("attention split-K workspace: [T, Hq, splits, D] partials then [T, Hq, splits, 2] (max, sum)",
          "[attention][contracts]") {
  CHECK(attention_decode_workspace_bytes(4, 8, 256, 1) == 0);
  CHECK(attention_decode_workspace_bytes(4, 8, 256, 0) == 0);
  CHECK(attention_decode_workspace_bytes(4, 8, 256, 2) == 4u * 8 * 2 * (256 + 2) * 4);
  CHECK(attention_decode_workspace_bytes(2, 2, 24, 2) == 2u * 2 * 2 * (24 + 2) * 4);
  CHECK(attention_decode_workspace_bytes(1, 6, 16, 32) == 1u * 6 * 32 * (16 + 2) * 4);
  CHECK(attention_decode_workspace_bytes(0, 6, 16, 32) == 0);
  CHECK(attention_decode_workspace_bytes(1, 0, 16, 32) == 0);
  CHECK(attention_decode_workspace_bytes(1, 6, 0, 32) == 0);
  CHECK(attention_decode_workspace_bytes(-1, 6, 16, 32) == 0);
}

TEST_CASE("attention shapes: the kernels the model presets get", "[attention][contracts]") {
  // 4B (16 q heads, 4 kv heads) and 27B (24, 4), D 256: every kernel, bf16 only on the tensor cores.
  for (const char* name : {"qwen3.5-4b", "qwen3.5-27b"}) {
    CAPTURE(name);
    const Qwen35Config c = preset(name);
    REQUIRE(c.D == 256);
    CHECK(attention_supports(c.Hq, c.Hkv, c.D));
    CHECK(attention_supports(c.Hq, c.Hkv, c.D, DType::f32));
    CHECK(attention_tuned_head_dim(c.D));
    CHECK(attention_prefill_mma_supports(c.D, DType::bf16, DType::bf16));
    CHECK(attention_prefill_wgmma_supports(c.D, DType::bf16, DType::bf16));
    CHECK(attention_decode_mma_supports(c.Hq, c.Hkv, c.D, DType::bf16, DType::bf16));
    CHECK_FALSE(attention_decode_mma_supports(c.Hq, c.Hkv, c.D, DType::f32, DType::f32));
    CHECK(attention_decode_mma_smem(c.D) == 196608);
    CHECK(attention_prefill_wgmma_smem(c.D) == 197632);
    CHECK(attention_prefill_mma_smem(c.D) == 101888);
  }
  // The test presets: D 32, the tuned CUDA-core kernels and the mma prefill; no decode mma or wgmma.
  const Qwen35Config tiny = preset("tiny");
  CHECK(attention_supports(tiny.Hq, tiny.Hkv, tiny.D));
  CHECK(attention_prefill_mma_supports(tiny.D, DType::bf16, DType::bf16));
  CHECK_FALSE(attention_prefill_wgmma_supports(tiny.D, DType::bf16, DType::bf16));
  CHECK_FALSE(attention_decode_mma_supports(tiny.Hq, tiny.Hkv, tiny.D, DType::bf16, DType::bf16));
}

TEST_CASE("delta-rule column split: Dk 8 builds Q = 1 and 4, as Dk 16", "[delta_rule][contracts]") {
  for (int Dk : {8, 16, 32, 64}) {
    CAPTURE(Dk);
    // Automatic: 2 is built for Dk = 128 only, so 1 while Dv fits 256 threads, then 4 up to 512 / 4.
    CHECK(delta_rule_decode_split(Dk, 8) == 1);
    CHECK(delta_rule_decode_split(Dk, 24) == 1);
    CHECK(delta_rule_decode_split(Dk, 256) == 1);
    CHECK(delta_rule_decode_split(Dk, 257) == 0);  // q = 1: 288 > 256 threads; q = 4: 1056 > 512
    CHECK(delta_rule_decode_split(Dk, 24, 1) == 1);
    CHECK(delta_rule_decode_split(Dk, 24, 4) == 4);
    CHECK(delta_rule_decode_split(Dk, 128, 4) == 4);
    CHECK(delta_rule_decode_split(Dk, 129, 4) == 0);  // round_up(516, 32) > 512
    CHECK(delta_rule_decode_split(Dk, 24, 2) == 0);
    CHECK(delta_rule_decode_split(Dk, 24, 8) == 0);
  }
  CHECK(delta_rule_decode_split(128, 24) == 2);
  for (int Dk : {0, 1, 4, 12, 24, 48, 96, 256}) {  // no tile built
    CAPTURE(Dk);
    CHECK(delta_rule_decode_split(Dk, 16) == 0);
    CHECK(delta_rule_decode_split(Dk, 16, 1) == 0);
  }
  CHECK(delta_rule_decode_split(8, 0) == 0);
  // gdn.decode's unfused contract launches the delta rule with the automatic split.
  const auto c = gdn_decode_contract(GdnDecodeArm::unfused, GdnDecodeShape{3, 2, 2, 8, 8, 4});
  CHECK(c.arm == GdnDecodeArm::unfused);
  CHECK(c.grid == Dim3{2, 3, 1});
  CHECK(c.block == Dim3{32, 1, 1});
  CHECK(c.kernel == "delta_rule_decode");
  // Dk = 128 runs split 2 in two column blocks a v-head: grid Hv * 2, half-width blocks.
  const auto c2 = gdn_decode_contract(GdnDecodeArm::unfused, GdnDecodeShape{5, 16, 32, 128, 128, 4});
  CHECK(c2.grid == Dim3{64, 5, 1});
  CHECK(c2.block == Dim3{128, 1, 1});
  // A bf16 state: the column-pair kernel in one block a head (64 pairs x 2 threads); not with the
  // fused norm, which takes one block a head of 128 columns x 2 threads.
  const auto p2 = gdn_decode_contract(GdnDecodeArm::unfused, GdnDecodeShape{5, 16, 32, 128, 128, 4, 2, false});
  CHECK(p2.grid == Dim3{32, 5, 1});
  CHECK(p2.block == Dim3{128, 1, 1});
  for (int ssm : {4, 2}) {
    CAPTURE(ssm);
    const auto n2 = gdn_decode_contract(GdnDecodeArm::unfused, GdnDecodeShape{5, 16, 32, 128, 128, 4, ssm, true});
    CHECK(n2.grid == Dim3{32, 5, 1});
    CHECK(n2.block == Dim3{256, 1, 1});
  }
  // Split 1 (Dk 8) keeps one column a thread, bf16 or not; so does an odd Dv (33 columns x 2
  // threads, rounded up to 96), while Dv 44 pairs (22 pairs x 2 threads: 64, not 96).
  CHECK(gdn_decode_contract(GdnDecodeArm::unfused, GdnDecodeShape{3, 2, 2, 8, 8, 4, 2, false}).block == c.block);
  CHECK(gdn_decode_contract(GdnDecodeArm::unfused, GdnDecodeShape{3, 1, 2, 128, 33, 4, 2, false}).block ==
        Dim3{96, 1, 1});
  CHECK(gdn_decode_contract(GdnDecodeArm::unfused, GdnDecodeShape{3, 1, 2, 128, 44, 4, 2, false}).block ==
        Dim3{64, 1, 1});
  // The fused arm's launch does not depend on the state's dtype or the norm.
  const auto fa = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{5, 16, 32, 128, 128, 4});
  const auto fb = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{5, 16, 32, 128, 128, 4, 2, true});
  CHECK(fa.grid == fb.grid);
  CHECK(fa.block == fb.block);
  CHECK(fa.cluster == fb.cluster);
}

TEST_CASE("gdn.decode prep: the unfused delta rule's launch after one conv + post-conv kernel, or a named fallback",
          "[delta_rule][contracts]") {
  // The 4B and 27B heads (512 and 640 channels a k-head): prep, with exactly unfused's delta-rule launch.
  for (const GdnDecodeShape& sh :
       {GdnDecodeShape{32, 16, 32, 128, 128, 4}, GdnDecodeShape{8, 16, 48, 128, 128, 4},
        GdnDecodeShape{5, 16, 32, 128, 128, 4, 2, false}, GdnDecodeShape{5, 16, 32, 128, 128, 4, 4, true}}) {
    CAPTURE(sh.rows, sh.Hv, sh.ssm_bytes, sh.norm_fused);
    const auto p = gdn_decode_contract(GdnDecodeArm::prep, sh);
    const auto u = gdn_decode_contract(GdnDecodeArm::unfused, sh);
    CHECK(p.arm == GdnDecodeArm::prep);
    CHECK(p.fallback_reason.empty());
    CHECK(p.grid == u.grid);
    CHECK(p.block == u.block);
    CHECK(p.kernel == "gdn_decode_prep+delta_rule_decode");
  }
  CHECK(gdn_decode_prep_fits(16, 32, 128, 128, 4));
  CHECK(gdn_decode_prep_fits(1, 6, 128, 72, 4));         // 256 + 432 channels
  CHECK(gdn_decode_prep_fits(1, 3, 256, 170, 2));        // 512 + 510 = 1022 channels, the widest Dk
  CHECK_FALSE(gdn_decode_prep_fits(1, 3, 256, 171, 2));  // 1025 channels
  CHECK_FALSE(gdn_decode_prep_fits(1, 1, 512, 8, 4));    // Dk past the one-warp tree
  CHECK_FALSE(gdn_decode_prep_fits(2, 3, 64, 64, 4));    // Hv not a multiple of Hk
  CHECK_FALSE(gdn_decode_prep_fits(2, 2, 64, 64, 9));    // K past kConvMaxK
  // Past the kernel's channels: unfused, with the reason.
  const auto f = gdn_decode_contract(GdnDecodeArm::prep, GdnDecodeShape{4, 1, 8, 128, 128, 4});
  CHECK(f.arm == GdnDecodeArm::unfused);
  CHECK(f.fallback_reason.find("prep needs Dk <= 256 and at most 1024 conv channels a k-head") == 0);
  CHECK(f.kernel == "delta_rule_decode");
}

TEST_CASE("gdn.decode fused: the recurrence's grid in clusters of a k-head's blocks, or a named fallback",
          "[delta_rule][contracts]") {
  // 4B heads: 32 v-heads x 2 column blocks, 128 threads; clusters of 2 v-heads x 2 column blocks.
  const auto c4 = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{32, 16, 32, 128, 128, 4});
  CHECK(c4.arm == GdnDecodeArm::fused);
  CHECK(c4.fallback_reason.empty());
  CHECK(c4.grid == Dim3{64, 32, 1});
  CHECK(c4.block == Dim3{128, 1, 1});
  CHECK(c4.cluster == Dim3{4, 1, 1});
  CHECK(c4.smem_bytes == sizeof(float) * (6 * 128 + 64));
  CHECK(c4.kernel == "gdn_decode_fused");
  // 27B heads (Hv/Hk = 3): clusters of 6.
  const auto c27 = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{8, 16, 48, 128, 128, 4});
  CHECK(c27.grid == Dim3{96, 8, 1});
  CHECK(c27.cluster == Dim3{6, 1, 1});
  // Hv/Hk = 6: two column blocks would make clusters of 12 > 8, so one block a v-head.
  const auto c6 = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{2, 1, 6, 128, 72, 4});
  CHECK(c6.arm == GdnDecodeArm::fused);
  CHECK(c6.grid == Dim3{6, 2, 1});
  CHECK(c6.block == Dim3{160, 1, 1});  // 72 columns x 2 threads, rounded up to whole warps
  CHECK(c6.cluster == Dim3{6, 1, 1});
  CHECK(c6.smem_bytes == sizeof(float) * (6 * 128 + 72));
  // Hv/Hk = 16 exceeds the portable cluster: unfused, saying why; so does Dk = 32.
  for (const GdnDecodeShape& s : {GdnDecodeShape{2, 1, 16, 128, 128, 4}, GdnDecodeShape{2, 2, 6, 32, 64, 3}}) {
    CAPTURE(s.Hv, s.Dk);
    const auto f = gdn_decode_contract(GdnDecodeArm::fused, s);
    CHECK(f.arm == GdnDecodeArm::unfused);
    CHECK(f.fallback_reason.find("using unfused") != std::string::npos);
    CHECK(f.cluster == Dim3{1, 1, 1});
    CHECK(f.grid == gdn_decode_contract(GdnDecodeArm::unfused, s).grid);
  }
}

TEST_CASE("gdn.decode staged: the persistent delta rule's block and slab, or a named fallback",
          "[delta_rule][contracts]") {
  // 4B heads: f32 state, split 2, 128 columns x 2 threads; bf16 in column pairs, 64 pairs x 2.
  const auto f = gdn_decode_contract(GdnDecodeArm::staged, GdnDecodeShape{32, 16, 32, 128, 128, 4});
  CHECK(f.arm == GdnDecodeArm::staged);
  CHECK(f.fallback_reason.empty());
  CHECK(f.grid == Dim3{0, 1, 1});  // the device's: delta_rule_decode_staged_grid
  CHECK(f.block == Dim3{256, 1, 1});
  CHECK(f.smem_bytes == 128 * 128 * 4);
  CHECK(f.kernel == "delta_rule_decode_staged");
  const auto b = gdn_decode_contract(GdnDecodeArm::staged, GdnDecodeShape{32, 16, 32, 128, 128, 4, 2, false});
  CHECK(b.arm == GdnDecodeArm::staged);
  CHECK(b.block == Dim3{128, 1, 1});
  CHECK(b.smem_bytes == 128 * 128 * 2);
  // Split 1 (Dk 32): f32 stages one column a thread; bf16 needs pairs at split 2 and falls back.
  const auto f32 = gdn_decode_contract(GdnDecodeArm::staged, GdnDecodeShape{4, 2, 6, 32, 64, 4});
  CHECK(f32.arm == GdnDecodeArm::staged);
  CHECK(f32.block == Dim3{64, 1, 1});
  // Falls back, saying why: the fused norm, bf16 at split 1, 512 threads (Dv 256 at split 2).
  for (const GdnDecodeShape& s :
       {GdnDecodeShape{32, 16, 32, 128, 128, 4, 4, true}, GdnDecodeShape{4, 2, 6, 32, 64, 4, 2, false},
        GdnDecodeShape{4, 2, 4, 128, 256, 4, 4, false}}) {
    CAPTURE(s.Dk, s.Dv, s.ssm_bytes, s.norm_fused);
    const auto c = gdn_decode_contract(GdnDecodeArm::staged, s);
    CHECK(c.arm == GdnDecodeArm::unfused);
    CHECK(c.fallback_reason.find("staged needs") != std::string::npos);
    CHECK(c.fallback_reason.find("using unfused") != std::string::npos);
    CHECK(c.grid == gdn_decode_contract(GdnDecodeArm::unfused, s).grid);
  }
}

TEST_CASE("delta-rule column blocks: 2 for split 2, else 1, and a request must be 1, 2 or 4 and divide Dv",
          "[delta_rule][contracts]") {
  CHECK(delta_rule_decode_col_blocks(128, 2) == 2);
  CHECK(delta_rule_decode_col_blocks(127, 2) == 1);  // odd Dv: one block
  CHECK(delta_rule_decode_col_blocks(128, 1) == 1);
  CHECK(delta_rule_decode_col_blocks(128, 4) == 1);
  CHECK(delta_rule_decode_col_blocks(128, 2, 4) == 4);
  CHECK(delta_rule_decode_col_blocks(128, 1, 1) == 1);
  CHECK(delta_rule_decode_col_blocks(24, 4, 2) == 2);
  CHECK(delta_rule_decode_col_blocks(24, 2, 3) == 0);
  CHECK(delta_rule_decode_col_blocks(24, 2, 8) == 0);
  CHECK(delta_rule_decode_col_blocks(10, 2, 4) == 0);  // does not divide Dv
  // Where the column pairs may run: one block a head for an even Dv; a request still holds.
  CHECK(delta_rule_decode_col_blocks(128, 2, 0, true) == 1);
  CHECK(delta_rule_decode_col_blocks(128, 4, 0, true) == 1);
  CHECK(delta_rule_decode_col_blocks(127, 2, 0, true) == 1);
  CHECK(delta_rule_decode_col_blocks(128, 2, 2, true) == 2);
  CHECK(delta_rule_decode_col_blocks(128, 2, 3, true) == 0);
  CHECK(delta_rule_decode_may_pair(2, 2, false));
  CHECK(delta_rule_decode_may_pair(8, 2, false));
  CHECK_FALSE(delta_rule_decode_may_pair(1, 2, false));  // split 1: one column a thread
  CHECK_FALSE(delta_rule_decode_may_pair(2, 4, false));  // an f32 state
  CHECK_FALSE(delta_rule_decode_may_pair(2, 2, true));   // the fused norm
  CHECK(delta_rule_decode_col_blocks(128, 2, -1) == 0);
}

TEST_CASE("every Hugging Face fixture's head sizes pass the GPU step's checks and contracts", "[contracts][fixtures]") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(SG_TEST_SOURCE_DIR) / "tests" / "fixtures";
  REQUIRE(fs::is_directory(root));
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.is_directory() && fs::exists(e.path() / "config.json")) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  REQUIRE(dirs.size() >= 4);
  // The fixtures' attention head size and rotary dim (config.json: head_dim and
  // rope_parameters.partial_rotary_factor), and the delta rule's Dk, Dv.
  struct Want {
    std::string name;
    int D, rotary, Dk, Dv;
  };
  const std::vector<Want> wants = {{"h32-real-head-dims", 256, 64, 128, 128},
                                   {"h40-attn-first-v500", 24, 6, 8, 8},
                                   {"h48-tied-hv3x-dk32-dv16", 16, 8, 32, 16},
                                   {"h72-hv2x-dk16-dv24", 16, 4, 16, 24}};
  int matched = 0;
  for (const fs::path& dir : dirs) {
    const std::string name = dir.filename().string();
    CAPTURE(name);
    const Qwen35Config c = load_hf_config(dir / "config.json");
    const GdnDims& g = c.gdn;
    CAPTURE(c.D, c.Hq, c.Hkv, g.Hk, g.Hv, g.Dk, g.Dv, g.K);
    for (const Want& w : wants) {
      if (w.name != name) continue;
      ++matched;
      CHECK(c.D == w.D);
      CHECK(c.rotary_dim() == w.rotary);
      CHECK(g.Dk == w.Dk);
      CHECK(g.Dv == w.Dv);
    }
    // Attention (ModelStep's constructor check, both KV cache dtypes) and attn_prep's rotary
    // rule: even, 0 < rotary <= D.
    CHECK(attention_supports(c.Hq, c.Hkv, c.D, DType::f32));
    CHECK(attention_supports(c.Hq, c.Hkv, c.D, DType::bf16));
    CHECK(c.rotary_dim() % 2 == 0);
    CHECK(c.rotary_dim() > 0);
    CHECK(c.rotary_dim() <= c.D);
    // The delta rule: decode and the scan prefill share delta_rule_decode_split.
    CHECK(delta_rule_decode_split(g.Dk, g.Dv) != 0);
    // Post-conv: every arm takes the shape (token_tile falls back to fast unless Dk = Dv = 128).
    for (PostconvArm a : {PostconvArm::megablock, PostconvArm::fast, PostconvArm::split, PostconvArm::token_tile}) {
      const auto pc = postconv_contract(a, PostconvShape{128, g.Hk, g.Hv, g.Dk, g.Dv});
      const bool tile_ok = g.Dk == 128 && g.Dv == 128;
      CHECK(pc.arm == (a == PostconvArm::token_tile && !tile_ok ? PostconvArm::fast : a));
      CHECK(pc.fallback_reason.empty() == (pc.arm == a));
    }
    // conv.fwd over C = 2*Hk*Dk + Hv*Dv channels, every arm.
    for (ConvFwdArm a : {ConvFwdArm::tiled, ConvFwdArm::reg, ConvFwdArm::k4, ConvFwdArm::k4x2}) {
      for (ConvChunksArm ch : {ConvChunksArm::exact, ConvChunksArm::whole}) {
        CHECK_NOTHROW(conv_fwd_contract(a, ch, ConvFwdShape{128, 4, g.C(), g.K}));
      }
    }
    // The fused GDN arms need Dk = 128 (prefill) or Dk in {64, 128} and Dv % 32 == 0 (decode): the
    // small fixtures fall back to unfused, saying why.
    const auto pf = gdn_prefill_contract(GdnPrefillArm::fused, GdnPrefillShape{128, 4, g.Hk, g.Hv, g.Dk, g.Dv, g.K});
    CHECK(pf.arm == (gdn_prefill_fused_supports(g.Dk, g.Dv, g.K) ? GdnPrefillArm::fused : GdnPrefillArm::unfused));
    CHECK(pf.fallback_reason.empty() == (pf.arm == GdnPrefillArm::fused));
    const auto df = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{8, g.Hk, g.Hv, g.Dk, g.Dv, g.K});
    if (df.arm == GdnDecodeArm::unfused) {
      CHECK_FALSE(df.fallback_reason.empty());
      CHECK(df.kernel == "delta_rule_decode");
      const int q = delta_rule_decode_split(g.Dk, g.Dv), cb = delta_rule_decode_col_blocks(g.Dv, q);
      CHECK(df.grid == Dim3{static_cast<unsigned>(g.Hv * cb), 8, 1});
      CHECK(df.block == Dim3{static_cast<unsigned>((g.Dv / cb * q + 31) / 32 * 32), 1, 1});
    }
    if (name != "h32-real-head-dims") {
      CHECK(pf.arm == GdnPrefillArm::unfused);
      CHECK(df.arm == GdnDecodeArm::unfused);
    } else {  // the real models' head sizes: both fused arms run as asked
      CHECK(pf.arm == GdnPrefillArm::fused);
      CHECK(df.arm == GdnDecodeArm::fused);
    }
  }
  CHECK(matched == static_cast<int>(wants.size()));
}
