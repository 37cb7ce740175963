// GPU tests of the gated RMSNorm fused into the mma delta-rule prefill (DeltaRulePrefillParams::norm_w,
// kernels/delta_rule_prefill_mma.h): over the varlen batch of the mma tests (lengths 63, 0, 1024,
// 70 (a padding sequence), 1, 64, 200, 65; three rows past the live tokens), with history, without
// and mixed, f32 and bf16 weights, Dv 128 and 64, z at a wider token stride (as in_proj's output):
// the fused launch writes exactly the bytes of the plain launch followed by gated_rmsnorm in place
// (its 16-byte path, live_rows = the live tokens), every row of the buffer (two poisons), the same
// state bytes; a captured launch replays them; launchers without the fused form and the
// conditions it needs are refused.
#include <cstring>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "graphs/graph.h"
#include "graphs/manifest.h"
#include "kernels/delta_rule_prefill.h"
#include "kernels/delta_rule_prefill_chunked.h"
#include "kernels/delta_rule_prefill_mma.h"
#include "kernels/launch_check.h"
#include "kernels/rmsnorm.h"
#include "tests/gpu/delta_rule_prefill_fixture.h"
#include "tests/gpu/gated_norm_fixture.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"

using namespace sg;
using test::byte_diff;
using test::DevBuf;
using test::drp::kHistNames;
using test::drp::kHists;
using test::drp::kLens;
using test::drp::kSlots;
using test::drp::make_problem;
using test::drp::Problem;
using test::drp::Rig;
using test::drp::Shape;

namespace {

// The norm's inputs for problem P: z [max_tokens, stride] bf16 (the head values first, then 16
// unused columns), the weight [Dv], the live token count.
struct NormInputs {
  int64_t stride;
  DevBuf z, w, live;
  NormInputs(const Problem& P, DType wt, uint64_t seed)
      : stride(P.row() + 16),
        z(DevBuf::from(test::uniform(static_cast<size_t>(P.max_tokens * (P.row() + 16)), seed, -4.f, 4.f),
                       DType::bf16)),
        w(DevBuf::from(test::uniform(static_cast<size_t>(P.sh.Dv), seed + 1, -1.5f, 1.5f), wt)),
        live(DevBuf::from_i32({static_cast<int32_t>(P.T)})) {}
  void set(DeltaRulePrefillParams& p, const Problem& P, DType wt) const {
    p.norm_z = z.data();
    p.norm_z_stride = stride;
    p.norm_w = w.data();
    p.norm_w_dtype = wt;
    p.norm_eps = 1e-6f;
    p.norm_live = live.as<int32_t>();
    p.norm_rows = static_cast<int>(P.max_tokens);
  }
  GatedRmsNormParams kernel_params(const Problem& P, void* out, DType wt) const {
    return test::inplace_gated_norm(out, z.data(), stride, w.data(), wt, static_cast<int>(P.max_tokens), P.sh.Hv,
                                    P.sh.Dv, live.as<int32_t>());
  }
};

}  // namespace

TEST_CASE("mma delta-rule prefill with the fused gated norm: the bytes of the plain launch and gated_rmsnorm",
          "[gpu][delta_rule_mma][gated_norm]") {
  for (const Shape& sh : {Shape{2, 4, 128, 128}, Shape{1, 2, 128, 64}, Shape{2, 4, 64, 128}}) {
    for (DType wt : {DType::f32, DType::bf16}) {
      for (int h = 0; h < 3; ++h) {
        CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv, dtype_name(wt), kHistNames[h]);
        const uint64_t seed = 7300 + sh.Dk + sh.Dv + 10 * h + (wt == DType::bf16);
        INFO("seed " << seed);
        const Problem P = make_problem(sh, DType::bf16, kLens, kSlots, kHists[static_cast<size_t>(h)], seed);
        const NormInputs in(P, wt, seed + 20);
        Rig rig(P);
        // The plain launch, then the norm kernel in place on every row of the buffer.
        rig.reset(P, 0xA5);
        check(delta_rule_prefill_mma(rig.params(P), nullptr));
        const GatedRmsNormParams gp = in.kernel_params(P, rig.out.data(), wt);
        REQUIRE(gated_rmsnorm_vector_path(gp));
        check(gated_rmsnorm(gp, nullptr));
        check(cudaDeviceSynchronize());
        const auto want = rig.out.download(), want_state = rig.state.download();
        for (uint8_t poison : {uint8_t{0xA5}, uint8_t{0x5A}}) {
          CAPTURE(static_cast<int>(poison));
          rig.reset(P, poison);
          DeltaRulePrefillParams p = rig.params(P);
          in.set(p, P, wt);
          check(delta_rule_prefill_mma(p, nullptr));
          check(cudaDeviceSynchronize());
          CHECK(byte_diff(rig.out.download(), want, DType::bf16) == "");
          CHECK(byte_diff(rig.state.download(), want_state, DType::f32) == "");
        }
      }
    }
  }
}

TEST_CASE("mma delta-rule prefill with the fused gated norm: a captured launch replays the eager bytes",
          "[gpu][delta_rule_mma][gated_norm][graphs]") {
  const Shape sh{2, 4, 128, 128};
  const Problem P = make_problem(sh, DType::bf16, kLens, kSlots, kHists[2], 7400);
  const NormInputs in(P, DType::f32, 7401);
  Rig rig(P);
  rig.reset(P, 0xA5);
  DeltaRulePrefillParams p = rig.params(P);
  in.set(p, P, DType::f32);
  check(delta_rule_prefill_mma(p, nullptr));
  check(cudaDeviceSynchronize());
  const auto eager = rig.out.download(), eager_state = rig.state.download();
  rig.reset(P, 0x5A);
  Stream stream;
  NodeRecorder rec;
  CapturedGraph graph = CapturedGraph::capture("delta_rule.prefill mma+norm", stream.get(), [&] {
    check(delta_rule_prefill_mma(p, stream.get()));
    rec.launched(stream.get(), NodeLabel{-1, "delta_rule.prefill", "mma+gated_rmsnorm", 0});
  });
  const Manifest m = build_manifest("delta_rule.prefill mma+norm", "-", graph.graph(), rec);
  REQUIRE(m.nodes.size() == 1);
  // One more row of blocks than sequences: they zero the rows past the live tokens.
  CHECK(m.nodes[0].grid == Dim3{static_cast<unsigned>(sh.Hv), static_cast<unsigned>(P.max_seqs + 1), 1});
  graph.replay(stream.get());
  stream.sync();
  CHECK(byte_diff(rig.out.download(), eager, DType::bf16) == "");
  CHECK(byte_diff(rig.state.download(), eager_state, DType::f32) == "");
}

TEST_CASE("delta-rule prefill: a fused gated norm is refused where it is not built",
          "[gpu][delta_rule_mma][gated_norm]") {
  const Problem P = make_problem(Shape{1, 2, 128, 128}, DType::bf16, {5, 3}, {1, 2}, {0, 1}, 7500);
  const NormInputs in(P, DType::f32, 7501);
  Rig rig(P);
  rig.reset(P, 0xA5);
  DeltaRulePrefillParams p = rig.params(P);
  in.set(p, P, DType::f32);
  std::string want;
  cudaError_t err = cudaSuccess;
  SECTION("the scan") {
    err = delta_rule_prefill(p, nullptr);
    want = "delta_rule.prefill: a fused output norm (norm_w) is built only in the mma form";
  }
  SECTION("the chunked form") {
    err = delta_rule_prefill_chunked(p, nullptr);
    want = "delta_rule.prefill (chunked): a fused output norm (norm_w) is built only in the mma form";
  }
  SECTION("two Dv tiles") {
    err = delta_rule_prefill_mma(p, nullptr, 64);
    want = "a fused norm needs Dv 64 or 128 in one Dv tile";
  }
  SECTION("f32 output") {
    p.out_dtype = DType::f32;
    err = delta_rule_prefill_mma(p, nullptr);
    want = "a fused norm needs bf16 q, k, v and out";
  }
  SECTION("no live count") {
    p.norm_live = nullptr;
    err = delta_rule_prefill_mma(p, nullptr);
    want = "norm_live";
  }
  SECTION("an odd z stride") {
    p.norm_z_stride = in.stride - 1;
    err = delta_rule_prefill_mma(p, nullptr);
    want = "a norm_z stride that is a multiple of 8";
  }
  CHECK(err == cudaErrorInvalidValue);
  const std::string refusal = take_launch_refusal();
  INFO(refusal);
  CHECK(refusal.find(want) != std::string::npos);
  check(cudaDeviceSynchronize());
  size_t changed = 0;
  for (uint8_t x : rig.out.download()) changed += x != 0xA5;
  CHECK(changed == 0);
}
