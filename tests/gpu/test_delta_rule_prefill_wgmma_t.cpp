// GPU tests of the two-kernel warpgroup delta-rule prefill (kernels/delta_rule_prefill_wgmma_t.h:
// every chunk's T and P, then the recurrence with the state transposed), the one-kernel form's tests
// (test_delta_rule_prefill_wgmma.cpp) on the same problems and tolerances (compute capability 9.0,
// else each case says it did not run):
// - against ref::delta_rule_prefill_chunked (double): the fixture's varlen batch with history,
//   without and mixed, shapes (Hk, Hv) = (2, 4), (1, 2) and (1, 3), bf16 and f32 outputs, f32 and bf16
//   states, fast decay; the worst errors seen are printed; and within 1e-5 (normalised) of the
//   one-kernel form, which sums the same products in the same order but with the operands'
//   roles swapped (whether the bytes are equal is printed);
// - invariants: padding rows exactly +0; padding, zero-length and unused slots keep their state
//   bytes; rows past the live tokens untouched; inputs past them NaN and never read; deterministic;
// - a captured launch (two kernel nodes: their grids, blocks and shared memory; a T block of two
//   v-heads and of one), replay == eager;
// - two segments with history agree with one prefill; a NaN / Inf never reaches an earlier token;
// - tokens past max_tokens: the sequences whose chunk records would fall past the workspace get NaN
//   rows and keep their state, the others are unchanged;
// - outputs and state at addresses aligned to their element only: the same bytes;
// - no live sequence / bad arguments (the workspace among them).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "graphs/manifest.h"
#include "kernels/delta_rule_prefill_wgmma.h"
#include "kernels/delta_rule_prefill_wgmma_t.h"
#include "kernels/ref/delta_rule_ref.h"
#include "models/step_settings.h"
#include "tests/gpu/delta_rule_prefill_fixture.h"
#include "tests/support/catch.h"
#include "tests/support/gpu_buffers.h"
#include "tests/support/tolerance.h"

using namespace sg;
using test::byte_diff;
using test::DevBuf;

namespace {

constexpr double kTolF32 = 1e-4;  // normalised, f32 outputs and the state: the one-kernel form's

using namespace test::drp;  // NOLINT: the delta-rule prefill fixture (problems, rig, reference, checks)

bool on_cc90() {
  const DeviceLimits d = DeviceLimits::current();
  return delta_rule_prefill_wgmma_device(d.cc_major, d.cc_minor);
}

// The form's launch over params p of problem P (its token bucket), with a workspace of its own.
void launch(const Problem& P, const DeltaRulePrefillParams& p, cudaStream_t stream = nullptr) {
  const int tokens = static_cast<int>(P.max_tokens);
  const size_t bytes = delta_rule_prefill_wgmma_t_workspace(tokens, p.max_seqs, p.Hv);
  const DevBuf ws(std::max<size_t>(bytes, 16), 0x7F);  // garbage records: every one read is written first
  check(delta_rule_prefill_wgmma_t(p, ws.data(), bytes, tokens, stream));
  check(cudaStreamSynchronize(stream));
}

Result run(const Problem& P, Rig& rig, uint8_t poison = 0xA5) {
  rig.reset(P, poison);
  launch(P, rig.params(P));
  return {rig.out.download(), rig.state.download()};
}

}  // namespace

TEST_CASE("two-kernel wgmma delta-rule prefill matches the reference, keeps the invariants",
          "[gpu][delta_rule_wgmma_t]") {
  if (!on_cc90()) {
    WARN("not run: the two-kernel wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  double worst_vs_one = 0;
  int runs = 0, byte_equal = 0;  // comparisons with the one-kernel form, and those with equal bytes
  test::drp::check_warpgroup_matrix(
      "two-kernel wgmma", kTolF32, [](const Problem& P, const DeltaRulePrefillParams& p) { launch(P, p); },
      [&](const Problem& P, Rig& rig, const DeltaRulePrefillParams& pf, const Result& f) {
        // The one-kernel form over the same f32 output buffer, poisoned again: every live row is
        // written, within 1e-5 (normalised to the largest magnitude) of this form's.
        rig.reset(P, 0xA5);
        const size_t live = P.live_out_elems(), out_bytes = P.out_elems() * 4;
        check(cudaMemset(pf.out, 0x5A, out_bytes));
        check(delta_rule_prefill_wgmma(pf, nullptr));
        check(cudaDeviceSynchronize());
        std::vector<uint8_t> one_out(out_bytes);
        check(cudaMemcpy(one_out.data(), pf.out, out_bytes, cudaMemcpyDeviceToHost));
        const std::vector<uint8_t> one_state = rig.state.download();
        ++runs;
        byte_equal += std::memcmp(f.out.data(), one_out.data(), live * 4) == 0 && f.state == one_state;
        const auto fo = test::from_bytes(f.out, DType::f32), oo = test::from_bytes(one_out, DType::f32);
        const auto fs = test::from_bytes(f.state, DType::f32), os = test::from_bytes(one_state, DType::f32);
        // Largest |difference| over the largest magnitude; a NaN on either side fails (tolerance.h).
        const double dout = test::max_normalised_error(fo.data(), oo.data(), live);
        const double dstate = test::max_normalised_error(fs, os);
        CAPTURE(dout, dstate);
        // Where the two forms part (chunks, rows, heads, columns): the product at fault.
        if (!(dout <= 1e-5)) test::drp::warn_error_maps(P, fo.data(), oo.data(), nullptr, nullptr, 1e-5);
        if (!(dstate <= 1e-5)) test::drp::warn_error_maps(P, nullptr, nullptr, fs.data(), os.data(), 1e-5);
        CHECK(dout <= 1e-5);
        CHECK(dstate <= 1e-5);
        worst_vs_one = std::max({worst_vs_one, dout, dstate});
      });
  std::printf(
      "two-kernel wgmma delta-rule prefill against the one-kernel form: largest difference %.3g, equal bytes "
      "in %d of %d runs\n",
      worst_vs_one, byte_equal, runs);
}

TEST_CASE("two-kernel wgmma delta-rule prefill: a captured launch replays the eager bytes",
          "[gpu][delta_rule_wgmma_t][graphs]") {
  if (!on_cc90()) {
    WARN("not run: the two-kernel wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  // Two v-heads a k head (a T block of two warpgroups) and three (a T block of one).
  for (const Shape sh : {Shape{2, 4, 128, 128}, Shape{1, 3, 128, 128}}) {
    CAPTURE(sh.Hk, sh.Hv);
    // Workspaces sized for batch A's token bucket (409 tokens, 7 programs): one for the capture and
    // one for the eager runs, so that a replay reads only records its own T node wrote.
    const size_t bytes = delta_rule_prefill_wgmma_t_workspace(409, 7, sh.Hv);
    const DevBuf ws(bytes, 0x7F), ws_eager(bytes, 0x7F);
    const auto nodes = check_replay_nodes(
        sh, DType::bf16, "wgmma-t", 2,
        [&](const DeltaRulePrefillParams& p, cudaStream_t s) {
          return delta_rule_prefill_wgmma_t(p, ws.data(), bytes, 409, s);
        },
        [&](const Problem& P, Rig& rig) {
          rig.reset(P, 0xA5);
          check(delta_rule_prefill_wgmma_t(rig.params(P), ws_eager.data(), bytes, 409, nullptr));
          check(cudaDeviceSynchronize());
          return Result{rig.out.download(), rig.state.download()};
        });
    // The T kernel: (ceil(409 / 64) + 7) records x Hv / V blocks of 128 V threads (V v-heads a
    // block); the recurrence: (Hv, max_seqs 7).
    const int V = sh.Hv / sh.Hk == 2 ? 2 : 1;
    CHECK(delta_rule_prefill_wgmma_t_chunk_heads(sh.Hk, sh.Hv) == V);
    CHECK(nodes[0].grid == Dim3{14 * static_cast<unsigned>(sh.Hv / V), 1, 1});
    CHECK(nodes[0].block == Dim3{128 * static_cast<unsigned>(V), 1, 1});
    CHECK(nodes[0].smem_bytes == delta_rule_prefill_wgmma_t_chunk_smem(sh.Hk, sh.Hv));
    CHECK(nodes[0].kernel.find("delta_chunk_t_kernel") != std::string::npos);
    CHECK(nodes[1].grid == Dim3{static_cast<unsigned>(sh.Hv), 7, 1});
    CHECK(nodes[1].block == Dim3{256, 1, 1});
    CHECK(nodes[1].smem_bytes == delta_rule_prefill_wgmma_t_smem());
    CHECK(nodes[1].kernel.find("delta_rule_wgmma_t_kernel") != std::string::npos);
  }
}

TEST_CASE("two-kernel wgmma delta-rule prefill: two segments with history agree with one prefill",
          "[gpu][delta_rule_wgmma_t]") {
  if (!on_cc90()) {
    WARN("not run: the two-kernel wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  test::drp::check_two_segments(Shape{2, 4, 128, 128}, DType::bf16, kTolBf16, kTolF32,
                                [](const Problem& P, Rig& rig) { return run(P, rig); });
}

TEST_CASE("two-kernel wgmma delta-rule prefill: a NaN or Inf in one token never reaches an earlier token's output",
          "[gpu][delta_rule_wgmma_t]") {
  if (!on_cc90()) {
    WARN("not run: the two-kernel wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  test::drp::check_nan_causal(DType::bf16, {5, 6, 7, 8, 9 + 37, 9 + 38, 9 + 39},
                              [](const Problem& P, Rig& rig) { return run(P, rig); });
}

TEST_CASE("two-kernel wgmma delta-rule prefill: tokens past max_tokens give NaN rows and keep the state",
          "[gpu][delta_rule_wgmma_t]") {
  if (!on_cc90()) {
    WARN("not run: the two-kernel wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  // Lengths 64, 64, 200 with a bucket of 128 tokens: sequences 0 and 1 are records 0 and 2 (a chunk
  // each), sequence 2 needs records 4 .. 7, past the ceil(128 / 64) + max_seqs 5 = 7 of the workspace.
  const Shape sh{1, 2, 128, 128};
  const Problem P = make_problem(sh, DType::bf16, {64, 64, 200}, {1, 2, 3}, {1, 0, 1}, 77);
  Rig rig(P), whole(P);
  const Result good = run(P, whole);
  rig.reset(P, 0xA5);
  const size_t bytes = delta_rule_prefill_wgmma_t_workspace(128, P.max_seqs, sh.Hv);
  const DevBuf ws(bytes, 0x7F);
  check(delta_rule_prefill_wgmma_t(rig.params(P), ws.data(), bytes, 128, nullptr));
  check(cudaDeviceSynchronize());
  const Result r{rig.out.download(), rig.state.download()};
  const size_t rb = static_cast<size_t>(P.row()) * 2, first2 = 128 * rb;
  CHECK(std::memcmp(r.out.data(), good.out.data(), first2) == 0);  // sequences 0 and 1 fit: their bytes
  const auto tail = test::from_bytes(std::vector<uint8_t>(r.out.begin() + static_cast<int64_t>(first2),
                                                          r.out.begin() + static_cast<int64_t>(328 * rb)),
                                     DType::bf16);
  CHECK(std::all_of(tail.begin(), tail.end(), [](float x) { return std::isnan(x); }));
  const size_t slot_bytes = static_cast<size_t>(sh.Hv * P.head_size()) * 4;
  const auto s0 = test::to_bytes(P.state0, DType::f32);
  CHECK(std::memcmp(r.state.data() + 3 * slot_bytes, s0.data() + 3 * slot_bytes, slot_bytes) == 0);
  CHECK(std::memcmp(r.state.data() + 1 * slot_bytes, good.state.data() + 1 * slot_bytes, 2 * slot_bytes) == 0);
  check_untouched(P, r, 0xA5);
}

TEST_CASE("two-kernel wgmma delta-rule prefill: outputs and state aligned to their element only",
          "[gpu][delta_rule_wgmma_t]") {
  if (!on_cc90()) {
    WARN("not run: the two-kernel wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  // Outputs and the state one element past a 16-byte boundary (f32 and bf16 each): the bytes of
  // the aligned runs (bf16 outputs on an aligned base go through the kernel's shared output tile,
  // on the shifted one element by element, so the two store paths are compared here).
  const Shape sh{1, 2, 128, 128};
  const Problem P = make_problem(sh, DType::bf16, {70, 5, 130}, {0, 4, 2}, {1, 0, 1}, 123);
  for (DType st : {DType::f32, DType::bf16}) {
    for (DType ot : {DType::f32, DType::bf16}) {
      CAPTURE(dtype_name(st), dtype_name(ot));
      Rig rig(P);
      const auto s0 = test::to_bytes(P.state0, st);
      const size_t es = dtype_size(st), eo = dtype_size(ot), out_bytes = P.out_elems() * eo;
      DevBuf state(s0.size() + 16), out(out_bytes + 16);
      auto run_at = [&](size_t offset_elems) {
        check(cudaMemcpy(static_cast<char*>(state.data()) + offset_elems * es, s0.data(), s0.size(),
                         cudaMemcpyHostToDevice));
        out.fill(0xA5);
        DeltaRulePrefillParams p = rig.params(P);
        p.state = static_cast<char*>(state.data()) + offset_elems * es;
        p.state_dtype = st;
        p.out = static_cast<char*>(out.data()) + offset_elems * eo;
        p.out_dtype = ot;
        launch(P, p);
        const auto so = state.download(), oo = out.download();
        return Result{std::vector<uint8_t>(oo.begin() + static_cast<int64_t>(offset_elems * eo),
                                           oo.begin() + static_cast<int64_t>(offset_elems * eo + out_bytes)),
                      std::vector<uint8_t>(so.begin() + static_cast<int64_t>(offset_elems * es),
                                           so.begin() + static_cast<int64_t>(offset_elems * es + s0.size()))};
      };
      const Result aligned = run_at(0), shifted = run_at(1);
      CHECK(byte_diff(shifted.out, aligned.out, ot) == "");
      CHECK(byte_diff(shifted.state, aligned.state, st) == "");
    }
  }
}

TEST_CASE("two-kernel wgmma delta-rule prefill: no live sequence touches nothing, bad arguments are refused",
          "[gpu][delta_rule_wgmma_t]") {
  if (!on_cc90()) {
    WARN("launches not run: the two-kernel wgmma delta-rule prefill needs compute capability 9.0");
    return;
  }
  const Shape sh{1, 2, 128, 128};
  test::drp::check_no_live(sh, [](const Problem& P, Rig& rig) { return run(P, rig); });
  Problem P = make_problem(sh, DType::bf16, {4, 3}, {1, 2}, {1, 0}, 5);
  P.n_live = 0;  // the refusals below must leave the state as it is
  Rig rig(P);
  rig.reset(P, 0xA5);
  auto p = rig.params(P);
  const int tokens = static_cast<int>(P.max_tokens);
  size_t bytes = delta_rule_prefill_wgmma_t_workspace(tokens, p.max_seqs, sh.Hv);
  const DevBuf ws(bytes + 16, 0);
  void* w = ws.data();
  int max_tokens = tokens;
  cudaError_t want = cudaErrorInvalidValue;
  const float nw[128] = {};
  SECTION("max_seqs 0 launches nothing") {
    p.max_seqs = 0;
    want = cudaSuccess;
  }
  SECTION("Dk 64") { p.Dk = 64; }
  SECTION("f32 inputs") { p.qkv_dtype = DType::f32; }
  SECTION("Hv not a multiple of Hk") { p.Hk = 3; }
  SECTION("missing metadata") { p.n_seqs = nullptr; }
  SECTION("misaligned q") { p.q = static_cast<const uint16_t*>(p.q) + 1; }
  SECTION("a fused norm") { p.norm_w = nw; }
  SECTION("grid too tall") {
    p.max_seqs = 70000;
    bytes = delta_rule_prefill_wgmma_t_workspace(tokens, 70000, sh.Hv);  // claimed: only the grid is wrong
  }
  SECTION("no workspace") { w = nullptr; }
  SECTION("a misaligned workspace") { w = static_cast<char*>(w) + 8; }
  SECTION("a workspace too small") { bytes -= 16; }
  SECTION("max_tokens < 0") { max_tokens = -1; }
  CHECK(delta_rule_prefill_wgmma_t(p, w, bytes, max_tokens, nullptr) == want);
  check(cudaDeviceSynchronize());
  CHECK(byte_diff(rig.state.download(), test::to_bytes(P.state0, DType::f32), DType::f32) == "");
}
