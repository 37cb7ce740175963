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
