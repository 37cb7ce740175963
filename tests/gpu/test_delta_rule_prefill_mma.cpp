// GPU tests of the tensor-core chunked delta-rule prefill (kernels/delta_rule_prefill_mma.h), the
// chunked kernel's tests where they apply:
// - against ref::delta_rule_prefill_chunked (double) over a varlen batch with lengths 63, 0, 1024,
//   70 (padding), 1, 64, 200, 65, with history, without and mixed, f32 and bf16, every Dv tile,
//   shapes (Dk, Dv) = (128, 128), (128, 64), (64, 96), (32, 40), (32, 22), and fast decay
//   (g in [-20, -5]) at (128, 128). Tolerances (delta_rule_ref.h, the mma kernel): f32 outputs per
//   sequence and the final state per slot within normalised error kTolF32; bf16 outputs per element
//   within 2 bf16 ulp + 1e-4 and normalised 8e-3 (as the chunked kernel). The worst errors seen are
//   printed (the measurement behind the documented bound);
// - invariants: padding rows exactly +0; padding, zero-length and unused slots keep their state
//   bytes; live rows fully written (two poisons, same bytes), rows past the live tokens untouched;
//   programs beyond the live count (garbage metadata) do nothing; inputs past the live tokens are
//   NaN and must never be read; the result is deterministic (two runs, same bytes);
// - a captured launch: the node's grid, block and shared memory, and replay == eager bytes, also
//   after the metadata changed under the graph;
// - a sequence split into two prefills (the second with history) agrees with one prefill;
// - misaligned q, k, v, out or state take the element-wise path and give the vectorised path's bytes;
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
#include "kernels/delta_rule_prefill_mma.h"
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

constexpr double kTolF32 = 1e-4;  // normalised, outputs (f32) and state: delta_rule_ref.h (the mma kernel)

using test::drp::check_untouched;
using test::drp::Expected;
using test::drp::kHistNames;
using test::drp::kHists;
using test::drp::kLens;
using test::drp::kSlots;
using test::drp::kTolBf16;
using test::drp::make_problem;
using test::drp::norm_err;
using test::drp::Problem;
using test::drp::reference;
using test::drp::Result;
using test::drp::Rig;
using test::drp::segment_problem;
using test::drp::Shape;
using test::drp::Worst;

Result run(const Problem& P, Rig& rig, int tile = 0, uint8_t poison = 0xA5) {
  rig.reset(P, poison);
  check(delta_rule_prefill_mma(rig.params(P), nullptr, tile));
  check(cudaDeviceSynchronize());
  return {rig.out.download(), rig.state.download()};
}

}  // namespace

TEST_CASE("mma delta-rule prefill matches the reference, keeps the invariants", "[gpu][delta_rule_mma]") {
  // (32, 22): Dv % 4 != 0, so the kernel takes its element-wise (not vectorised) loads and stores.
  const std::vector<Shape> shapes = {{2, 4, 128, 128}, {1, 2, 128, 64}, {1, 3, 64, 96}, {2, 4, 32, 40}, {1, 2, 32, 22}};
  Worst worst, worst_fast;
  for (const Shape& sh : shapes) {
    REQUIRE(delta_rule_prefill_mma_supports(sh.Dk, sh.Dv));
    for (bool fast : {false, true}) {
      if (fast && sh.Dk != 128) continue;
      for (DType t : {DType::f32, DType::bf16}) {
        for (int h = 0; h < 3; ++h) {
          CAPTURE(sh.Hk, sh.Hv, sh.Dk, sh.Dv, fast, dtype_name(t), kHistNames[h]);
          const uint64_t seed = 9100 + 10 * sh.Dk + sh.Dv + sh.Hv + h;
          INFO("seed " << seed);
          Problem P = make_problem(sh, t, kLens, kSlots, kHists[static_cast<size_t>(h)], seed);
          if (fast) {  // fast decay on every live token: g in [-20, -5]
            const auto g = test::uniform(static_cast<size_t>(P.T) * sh.Hv, seed + 7, -20.f, -5.f);
            std::copy(g.begin(), g.end(), P.g.begin());
          }
          Rig rig(P);
          const Expected ref = reference(P);
          const Result a = run(P, rig, 0, 0xA5);
          test::drp::check_close(P, a, ref, kTolF32, fast ? &worst_fast : &worst);
          check_untouched(P, a, 0xA5);
          // Every live row is written (another poison gives the same bytes), and the run is deterministic.
          const Result b = run(P, rig, 0, 0x5A);
          const size_t live_bytes = static_cast<size_t>(P.T * P.row()) * dtype_size(t);
          CHECK(std::memcmp(a.out.data(), b.out.data(), live_bytes) == 0);
          CHECK(byte_diff(b.state, a.state, DType::f32) == "");
          check_untouched(P, b, 0x5A);
          // Every Dv tile (the automatic one included) is within the tolerance.
          for (int tile : {32, 64, 128}) {
            if (fast) continue;
            CAPTURE(tile, delta_rule_prefill_mma_smem(sh.Dk, tile, t));
            const Result r = run(P, rig, tile);
            test::drp::check_close(P, r, ref, kTolF32, &worst);
            check_untouched(P, r, 0xA5);
          }
        }
      }
    }
  }
  std::printf(
      "mma delta-rule prefill, worst normalised error vs the double reference: f32 outputs %.3g, state %.3g; "
      "fast decay: f32 outputs %.3g, state %.3g\n",
      worst.out, worst.state, worst_fast.out, worst_fast.state);
}

TEST_CASE("mma delta-rule prefill: a captured launch replays the eager bytes", "[gpu][delta_rule_mma][graphs]") {
  const Shape sh{2, 4, 128, 128};
  for (DType t : {DType::bf16, DType::f32}) {
    CAPTURE(dtype_name(t));
    const ManifestNode n = test::drp::check_replay(
        sh, t, "mma", [](const DeltaRulePrefillParams& p, cudaStream_t s) { return delta_rule_prefill_mma(p, s); },
        [](const Problem& P, Rig& rig) { return run(P, rig); });
    const int tile = delta_rule_prefill_mma_tile(sh.Dv);
    CHECK(n.grid == Dim3{static_cast<unsigned>((sh.Dv + tile - 1) / tile * sh.Hv), 7, 1});  // max_seqs: 5 live + 2
    CHECK(n.block == Dim3{static_cast<unsigned>(4 * tile), 1, 1});
    CHECK(n.smem_bytes == delta_rule_prefill_mma_smem(sh.Dk, tile, t));
    CAPTURE(n.kernel);
    CHECK(n.kernel.find("delta_rule_mma_kernel") != std::string::npos);
  }
}

TEST_CASE("mma delta-rule prefill: two segments with history agree with one prefill", "[gpu][delta_rule_mma]") {
  for (DType t : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(t));
    test::drp::check_two_segments(Shape{2, 4, 128, 128}, t, t == DType::f32 ? kTolF32 : kTolBf16, kTolF32,
                                  [](const Problem& P, Rig& rig) { return run(P, rig); });
  }
}

TEST_CASE("mma delta-rule prefill: misaligned buffers take the element-wise path with the same bytes",
          "[gpu][delta_rule_mma]") {
  const Shape sh{2, 4, 64, 64};
  for (DType t : {DType::bf16, DType::f32}) {
    CAPTURE(dtype_name(t));
    const Problem P = make_problem(sh, t, {70, 0, 129, 5, 33}, {3, 7, -1, 1, 8}, {1, 0, 1, 0, 1}, 777);
    Rig rig(P);
    const Result aligned = run(P, rig);
    const size_t es = dtype_size(t);
    auto shifted = [](const std::vector<float>& x, DType dt) {
      std::vector<float> y(x.size() + 1, 0.0f);
      std::copy(x.begin(), x.end(), y.begin() + 1);
      return DevBuf::from(y, dt);
    };
    const DevBuf q1 = shifted(P.q, t), k1 = shifted(P.k, t), v1 = shifted(P.v, t);
    const DevBuf s1 = shifted(P.state0, DType::f32);
    const DevBuf out1(P.out_bytes() + es, 0xA5);
    auto at = [](const DevBuf& b, size_t bytes) { return static_cast<void*>(static_cast<uint8_t*>(b.data()) + bytes); };
    for (const char* which : {"q", "k", "v", "state", "out", "all"}) {
      CAPTURE(which);
      const std::string w = which;
      rig.reset(P, 0xA5);
      const auto s0 = test::to_bytes(P.state0, DType::f32);
      check(cudaMemcpy(at(s1, 4), s0.data(), s0.size(), cudaMemcpyHostToDevice));
      check(cudaMemset(out1.data(), 0xA5, P.out_bytes() + es));
      DeltaRulePrefillParams p = rig.params(P);
      if (w == "q" || w == "all") p.q = at(q1, es);
      if (w == "k" || w == "all") p.k = at(k1, es);
      if (w == "v" || w == "all") p.v = at(v1, es);
      if (w == "state" || w == "all") p.state = static_cast<float*>(at(s1, 4));
      if (w == "out" || w == "all") p.out = at(out1, es);
      check(delta_rule_prefill_mma(p, nullptr));
      check(cudaDeviceSynchronize());
      const auto strip = [](const std::vector<uint8_t>& b, size_t n) {
        return std::vector<uint8_t>(b.begin() + static_cast<int64_t>(n), b.end());
      };
      const std::vector<uint8_t> out = p.out == rig.out.data() ? rig.out.download() : strip(out1.download(), es);
      const std::vector<uint8_t> state =
          p.state == rig.state.as<float>() ? rig.state.download() : strip(s1.download(), 4);
      CHECK(byte_diff(out, aligned.out, t) == "");
      CHECK(byte_diff(state, aligned.state, DType::f32) == "");
    }
  }
}

TEST_CASE("mma delta-rule prefill: a NaN or Inf in one token never reaches an earlier token's output",
          "[gpu][delta_rule_mma]") {
  for (DType t : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(t));
    // The poisoned token's row and every later row of its sequence (a NaN u reaches them through
    // P V' inside the tile and through the state) are not finite, as in the scan.
    test::drp::check_nan_causal(t, {5, 6, 7, 8, 9 + 37, 9 + 38, 9 + 39},
                                [](const Problem& P, Rig& rig) { return run(P, rig); });
  }
}

TEST_CASE("mma delta-rule prefill: no live sequence touches nothing, bad arguments are refused",
          "[gpu][delta_rule_mma]") {
  const Shape sh{1, 2, 64, 96};
  test::drp::check_no_live(sh, [](const Problem& P, Rig& rig) { return run(P, rig); });
  Problem P = make_problem(sh, DType::bf16, {4, 3}, {1, 2}, {1, 0}, 5);
  P.n_live = 0;  // the refusals below must leave the state as it is
  Rig rig(P);
  rig.reset(P, 0xA5);
  auto p = rig.params(P);
  int tile = 0;
  cudaError_t want = cudaErrorInvalidValue;
  SECTION("max_seqs 0 launches nothing") {
    p.max_seqs = 0;
    want = cudaSuccess;
  }
  SECTION("unsupported Dk") { p.Dk = 48; }
  SECTION("Hv not a multiple of Hk") { p.Hk = 3; }
  SECTION("tile not built") { tile = 16; }
  SECTION("missing metadata") { p.n_seqs = nullptr; }
  SECTION("missing output") { p.out = nullptr; }
  SECTION("f16 inputs") { p.qkv_dtype = DType::f16; }
  SECTION("grid too tall") { p.max_seqs = 70000; }
  CHECK(delta_rule_prefill_mma(p, nullptr, tile) == want);
  check(cudaDeviceSynchronize());
  CHECK(byte_diff(rig.state.download(), test::to_bytes(P.state0, DType::f32), DType::f32) == "");
}
