// GPU tests of the warpgroup chunked delta-rule prefill (kernels/delta_rule_prefill_wgmma.h), the
// mma kernel's tests where they apply (bf16 q, k, v with Dk = Dv = 128; compute capability 9.0,
// else each case says it did not run):
// - against ref::delta_rule_prefill_chunked (double) over the varlen batch of the fixture (lengths
//   63, 0, 1024, 70 (padding), 1, 64, 200, 65), with history, without and mixed, shapes (Hk, Hv)
//   = (2, 4) and (1, 2), bf16 and f32 outputs, f32 and bf16 states, and fast decay (g in [-20, -5]).
//   Tolerances: the mma kernel's (f32 outputs per sequence and the final state per slot within
//   normalised 1e-4; bf16 outputs within 2 bf16 ulp + 1e-4 per element and 8e-3 normalised); the
//   worst errors seen are printed;
// - invariants: padding rows exactly +0; padding, zero-length and unused slots keep their state
//   bytes; rows past the live tokens untouched; programs beyond the live count do nothing; inputs
//   past the live tokens are NaN and never read; deterministic (two runs, same bytes);
// - a captured launch: the node's grid, block and shared memory, and replay == eager bytes, also
//   after the metadata changed under the graph;
// - a sequence split into two prefills (the second with history) agrees with one prefill;
// - a NaN / Inf in one token never reaches an earlier token's output;
// - max_seqs = 0 / no live sequence / bad arguments; the setting's name, parse and resolve.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "graphs/graph.h"
#include "graphs/manifest.h"
#include "kernels/delta_rule_prefill_wgmma.h"
#include "kernels/delta_rule_prefill_wgmma_t.h"
#include "kernels/ref/delta_rule_ref.h"
#include "models/step_settings.h"
#include "tests/gpu/delta_rule_prefill_fixture.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/random.h"
#include "tests/support/tolerance.h"

using namespace sg;
using test::byte_diff;
using test::DevBuf;

namespace {

constexpr double kTolF32 = 1e-4;  // normalised, f32 outputs and the state: the mma kernel's

using namespace test::drp;  // NOLINT: the delta-rule prefill fixture (problems, rig, reference, checks)

bool on_cc90() {
  const DeviceLimits d = DeviceLimits::current();
  return delta_rule_prefill_wgmma_device(d.cc_major, d.cc_minor);
}

// One launch over P's rig with `out_t` outputs into `out` (the rig's buffer when null).
Result run(const Problem& P, Rig& rig, uint8_t poison = 0xA5) {
  rig.reset(P, poison);
  check(delta_rule_prefill_wgmma(rig.params(P), nullptr));
  check(cudaDeviceSynchronize());
  return {rig.out.download(), rig.state.download()};
}

}  // namespace

TEST_CASE("wgmma delta-rule prefill matches the reference, keeps the invariants", "[gpu][delta_rule_wgmma]") {
  if (!on_cc90()) {
    WARN("not run: the wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  test::drp::check_warpgroup_matrix(
      "wgmma", kTolF32,
      [](const Problem&, const DeltaRulePrefillParams& p) {
        check(delta_rule_prefill_wgmma(p, nullptr));
        check(cudaDeviceSynchronize());
      },
      [](const Problem&, Rig&, const DeltaRulePrefillParams&, const Result&) {});
}

TEST_CASE("wgmma delta-rule prefill: a captured launch replays the eager bytes", "[gpu][delta_rule_wgmma][graphs]") {
  if (!on_cc90()) {
    WARN("not run: the wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  const Shape sh{2, 4, 128, 128};
  const ManifestNode n = check_replay(sh, DType::bf16, "wgmma", delta_rule_prefill_wgmma,
                                      [](const Problem& P, Rig& rig) { return run(P, rig); });
  CHECK(n.grid == Dim3{static_cast<unsigned>(sh.Hv), 7, 1});  // max_seqs: 5 live + 2
  CHECK(n.block == Dim3{384, 1, 1});
  CHECK(n.smem_bytes == delta_rule_prefill_wgmma_smem());
  CAPTURE(n.kernel);
  CHECK(n.kernel.find("delta_rule_wgmma_kernel") != std::string::npos);
}

TEST_CASE("wgmma delta-rule prefill: two segments with history agree with one prefill", "[gpu][delta_rule_wgmma]") {
  if (!on_cc90()) {
    WARN("not run: the wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  // bf16 outputs (the form's inputs are bf16): the bf16 tolerance.
  test::drp::check_two_segments(Shape{2, 4, 128, 128}, DType::bf16, kTolBf16, kTolF32,
                                [](const Problem& P, Rig& rig) { return run(P, rig); });
}

TEST_CASE("wgmma delta-rule prefill: a NaN or Inf in one token never reaches an earlier token's output",
          "[gpu][delta_rule_wgmma]") {
  if (!on_cc90()) {
    WARN("not run: the wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  test::drp::check_nan_causal(DType::bf16, {5, 6, 7, 8, 9 + 37, 9 + 38, 9 + 39},
                              [](const Problem& P, Rig& rig) { return run(P, rig); });
}

TEST_CASE("wgmma delta-rule prefill: no live sequence touches nothing, bad arguments are refused",
          "[gpu][delta_rule_wgmma]") {
  if (!on_cc90()) {
    WARN("launches not run: the wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  const Shape sh{1, 2, 128, 128};
  test::drp::check_no_live(sh, [](const Problem& P, Rig& rig) { return run(P, rig); });
  Problem P = make_problem(sh, DType::bf16, {4, 3}, {1, 2}, {1, 0}, 5);
  P.n_live = 0;  // the refusals below must leave the state as it is
  Rig rig(P);
  rig.reset(P, 0xA5);
  auto p = rig.params(P);
  cudaError_t want = cudaErrorInvalidValue;
  const float w[128] = {};
  SECTION("max_seqs 0 launches nothing") {
    p.max_seqs = 0;
    want = cudaSuccess;
  }
  SECTION("Dk 64") { p.Dk = 64; }
  SECTION("Dv 64") { p.Dv = 64; }
  SECTION("f32 inputs") { p.qkv_dtype = DType::f32; }
  SECTION("Hv not a multiple of Hk") { p.Hk = 3; }
  SECTION("missing metadata") { p.n_seqs = nullptr; }
  SECTION("missing output") { p.out = nullptr; }
  SECTION("misaligned q") { p.q = static_cast<const uint16_t*>(p.q) + 1; }
  SECTION("misaligned state") { p.state = static_cast<float*>(p.state) + 1; }
  SECTION("a fused norm") { p.norm_w = w; }
  SECTION("grid too tall") { p.max_seqs = 70000; }
  CHECK(delta_rule_prefill_wgmma(p, nullptr) == want);
  check(cudaDeviceSynchronize());
  CHECK(byte_diff(rig.state.download(), test::to_bytes(P.state0, DType::f32), DType::f32) == "");
}

TEST_CASE("delta-prefill wgmma: name, parse, resolve", "[gpu][delta_rule_wgmma][model]") {
  CHECK(std::string(delta_prefill_name(DeltaPrefill::wgmma)) == "wgmma");
  CHECK(parse_delta_prefill("wgmma") == DeltaPrefill::wgmma);
  CHECK(chunked_delta_prefill("wgmma"));
  CHECK_THROWS_AS(parse_delta_prefill("WGMMA"), Error);
  DeviceLimits h200 = DeviceLimits::current();
  h200.cc_major = 9;
  h200.cc_minor = 0;
  h200.smem_optin = 227 * 1024;
  const GdnDims g4b{16, 32, 128, 128, 4};
  CHECK(resolve_delta_prefill(DeltaPrefill::wgmma, g4b, true, DType::bf16, h200) == DeltaPrefill::wgmma);
  // automatic picks the two-kernel form for bf16 steps where it runs (this one where only its shared
  // memory fits); mma where the gated norm is to be fused into the delta rule (built in the mma form
  // only), for other head dims and on other devices; f32 steps keep the chunked kernel.
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, h200) == DeltaPrefill::wgmma_t);
  DeviceLimits between = h200;  // room for one of the two forms only
  between.smem_optin = static_cast<int>(std::min(delta_rule_prefill_wgmma_smem(), delta_rule_prefill_wgmma_t_smem()));
  const DeltaPrefill fitting = delta_rule_prefill_wgmma_smem() <= delta_rule_prefill_wgmma_t_smem()
                                   ? DeltaPrefill::wgmma
                                   : DeltaPrefill::wgmma_t;
  if (delta_rule_prefill_wgmma_smem() != delta_rule_prefill_wgmma_t_smem()) {
    CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, between) == fitting);
  }
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, h200, true) == DeltaPrefill::mma);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, GdnDims{2, 4, 64, 64, 4}, true, DType::bf16, h200) ==
        DeltaPrefill::mma);
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::f32, h200) == DeltaPrefill::chunked);
  DeviceLimits ampere = h200;
  ampere.cc_major = 8;
  CHECK(resolve_delta_prefill(DeltaPrefill::automatic, g4b, true, DType::bf16, ampere) == DeltaPrefill::mma);
  // Not built for the shape or dtype, another device, too little shared memory: a clear error for
  // a prefill step, harmless without one.
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::wgmma, GdnDims{2, 4, 64, 64, 4}, true, DType::bf16, h200), Error);
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::wgmma, g4b, true, DType::f32, h200), Error);
  DeviceLimits other = h200;
  other.cc_major = 10;
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::wgmma, g4b, true, DType::bf16, other), Error);
  DeviceLimits small = h200;
  small.smem_optin = 100 * 1024;
  CHECK_THROWS_AS(resolve_delta_prefill(DeltaPrefill::wgmma, g4b, true, DType::bf16, small), Error);
  CHECK(resolve_delta_prefill(DeltaPrefill::wgmma, GdnDims{2, 4, 64, 64, 4}, false, DType::bf16, h200) ==
        DeltaPrefill::wgmma);
}
