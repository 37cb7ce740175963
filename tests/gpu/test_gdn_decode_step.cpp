// GPU tests of the walking skeleton: one GDN layer's decode step captured per batch size.
// - graph replay is byte-identical to the eager launch sequence for every key, padded batches too;
// - the GPU step matches the CPU reference within the tolerances written below;
// - padding rows (slot -1) leave state bytes untouched and get zero outputs;
// - every arm of conv.update and postconv gives the same bytes as the reference arm;
// - the manifest proves which kernels, arms and grids are in each graph; CUPTI times every node.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <tuple>

#include "engine/error.h"
#include "graphs/node_timer.h"
#include "kernels/contracts.h"
#include "kernels/op_bytes.h"
#include "kernels/ref/conv_ref.h"
#include "kernels/ref/delta_rule_ref.h"
#include "kernels/ref/postconv_ref.h"
#include "models/gdn_decode_step.h"
#include "tests/support/byte_diff_count.h"
#include "tests/support/catch.h"
#include "tests/support/random.h"

using namespace sg;

namespace {

// The 4B model's GDN shapes (C = 8192) and a small one with awkward sizes.
GdnDims dims_4b() { return GdnDims{16, 32, 128, 128, 4}; }
GdnDims dims_small() { return GdnDims{2, 6, 32, 64, 3}; }
// Supported by the fused decode arm (Dk = 64), with Hv/Hk = 3 and K = 3.
GdnDims dims_mid() { return GdnDims{2, 6, 64, 64, 3}; }
// The 27B model's GDN heads (Hv/Hk = 3: fused clusters of 6 blocks) on fewer heads.
GdnDims dims_27b_heads() { return GdnDims{2, 6, 128, 128, 4}; }
// Hv = Hk with one column block (Dk = 64: one thread a column): clusters of one block.
GdnDims dims_no_cluster() { return GdnDims{2, 2, 64, 64, 4}; }
// Hv/Hk = 6 with two column blocks would need clusters of 12: the fused arm takes one block per
// v-head (clusters of 6); Dv = 72 at 2 threads a column leaves 16 idle lanes in the last warp.
GdnDims dims_wide_group() { return GdnDims{1, 6, 128, 72, 4}; }

DecodeBatch make_batch(const GdnDims& d, int B, uint64_t seed, int num_slots) {
  DecodeBatch b;
  // Distinct slots spread over the cache, in a scrambled order.
  for (int r = 0; r < B; ++r) b.slots.push_back(static_cast<int32_t>((r * 7 + 3) % num_slots));
  b.x = test::uniform_bf16(static_cast<size_t>(B) * d.C(), seed, -2.f, 2.f);
  b.a = test::uniform_bf16(static_cast<size_t>(B) * d.Hv, seed + 1, -3.f, 3.f);
  b.b = test::uniform_bf16(static_cast<size_t>(B) * d.Hv, seed + 2, -3.f, 3.f);
  return b;
}

std::vector<float> as_floats(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<float> out;
  if (t == DType::bf16) {
    out.resize(bytes.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      bf16_t v;
      std::memcpy(&v.bits, bytes.data() + 2 * i, 2);
      out[i] = bf16_to_f32(v);
    }
  } else {
    out.resize(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), bytes.size());
  }
  return out;
}

using test::count_diff;

struct Snapshot {
  std::vector<uint8_t> out, conv, ssm;
};

Snapshot run_once(GdnDecodeStep& step, const DecodeBatch& batch, RunMode mode, const Snapshot& start) {
  step.set_conv_state_bytes(start.conv);
  step.set_ssm_state_bytes(start.ssm);
  int rows = step.run(batch, mode);
  return {step.output_bytes(rows), step.conv_state_bytes(), step.ssm_state_bytes()};
}

}  // namespace

TEST_CASE("graph replay is byte-identical to eager for every batch size, padding included", "[gpu][graphs][skeleton]") {
  for (DType act : {DType::bf16, DType::f32}) {
    GdnDecodeOptions o;
    o.act = act;
    GdnDecodeStep step(dims_4b(), o);
    step.capture_all();
    step.randomize_states(11);
    Snapshot start{{}, step.conv_state_bytes(), step.ssm_state_bytes()};
    for (int B : {1, 2, 3, 4, 5, 8, 16, 17, 24, 31, 32}) {
      CAPTURE(B, dtype_name(act));
      auto batch = make_batch(step.dims(), B, 100 + B, o.num_slots);
      Snapshot e = run_once(step, batch, RunMode::eager, start);
      Snapshot g = run_once(step, batch, RunMode::graph, start);
      CHECK(count_diff(e.out, g.out) == 0);
      CHECK(count_diff(e.conv, g.conv) == 0);
      CHECK(count_diff(e.ssm, g.ssm) == 0);
      // The step changed something (a test that cannot fail is a defect).
      CHECK(count_diff(start.ssm, g.ssm) > 0);
    }
    CHECK(step.eager_fallbacks() == 0);
  }
}

TEST_CASE("padding rows never touch state and get zero outputs", "[gpu][skeleton][padding]") {
  GdnDecodeOptions o;
  GdnDecodeStep step(dims_4b(), o);
  step.capture_all();
  step.randomize_states(5);
  Snapshot start{{}, step.conv_state_bytes(), step.ssm_state_bytes()};
  const auto& d = step.dims();
  for (int B : {3, 17}) {
    CAPTURE(B);
    auto batch = make_batch(d, B, 7 + B, o.num_slots);
    Snapshot g = run_once(step, batch, RunMode::graph, start);
    const int rows = *std::find_if(step.keys().begin(), step.keys().end(), [&](int k) { return k >= B; });
    REQUIRE(rows > B);
    std::set<int> live(batch.slots.begin(), batch.slots.end());
    const size_t conv_slot = static_cast<size_t>(d.C()) * (d.K - 1) * 2;
    const size_t ssm_slot = static_cast<size_t>(d.Hv) * d.Dk * d.Dv * 4;
    size_t untouched_wrong = 0, live_changed = 0;
    for (int s = 0; s < o.num_slots; ++s) {
      bool conv_same = std::memcmp(g.conv.data() + s * conv_slot, start.conv.data() + s * conv_slot, conv_slot) == 0;
      bool ssm_same = std::memcmp(g.ssm.data() + s * ssm_slot, start.ssm.data() + s * ssm_slot, ssm_slot) == 0;
      if (live.count(s)) {
        live_changed += (!conv_same && !ssm_same);
      } else {
        untouched_wrong += (!conv_same || !ssm_same);
      }
    }
    CHECK(untouched_wrong == 0);
    CHECK(live_changed == live.size());
    // Padding output rows [B, rows) are all zero bytes.
    const size_t row_bytes = static_cast<size_t>(d.Hv) * d.Dv * 2;
    REQUIRE(g.out.size() == rows * row_bytes);
    CHECK(std::all_of(g.out.begin() + B * row_bytes, g.out.end(), [](uint8_t x) { return x == 0; }));
  }
}

// Tolerances against the CPU reference (which uses the same fmaf order; differences come only from
// expf/log1pf ulps in the gates and SiLU, amplified through the recurrence):
//   conv state: byte-exact (pure data movement).
//   ssm state (f32): |gpu - ref| <= 1e-5 + 1e-4 |ref|.
//   output: bf16: |gpu - ref| <= 2 bf16 ulps of |ref| + 1e-4 (a one-ulp difference before the
//   final rounding can flip the rounding); f32: 1e-5 + 1e-4 |ref|.
TEST_CASE("the GPU step matches the CPU reference", "[gpu][skeleton][reference]") {
  for (auto [dims, act, arm] : {std::tuple{dims_4b(), DType::bf16, GdnDecodeArm::unfused},
                                std::tuple{dims_4b(), DType::bf16, GdnDecodeArm::fused},
                                std::tuple{dims_small(), DType::f32, GdnDecodeArm::unfused},
                                std::tuple{dims_small(), DType::bf16, GdnDecodeArm::unfused},
                                std::tuple{dims_mid(), DType::f32, GdnDecodeArm::fused}}) {
    CAPTURE(dims.C(), dtype_name(act), arm_name(arm));
    GdnDecodeOptions o;
    o.act = act;
    o.arms.gdn_decode = arm;
    GdnDecodeStep step(dims, o);
    step.capture_all();
    step.randomize_states(21);
    const int B = 17;
    auto batch = make_batch(dims, B, 33, o.num_slots);
    auto conv0 = as_floats(step.conv_state_bytes(), DType::bf16);
    auto ssm0 = as_floats(step.ssm_state_bytes(), DType::f32);
    const int rows = step.run(batch, RunMode::graph);
    auto out = as_floats(step.output_bytes(rows), act);
    auto conv1 = step.conv_state_bytes();
    auto ssm1 = as_floats(step.ssm_state_bytes(), DType::f32);

    // CPU reference on the same (padded) batch.
    const ref::Store st = act == DType::bf16 ? ref::Store::bf16 : ref::Store::f32;
    auto slots = batch.slots;
    slots.resize(static_cast<size_t>(rows), -1);
    std::vector<float> x = batch.x, a = batch.a, b = batch.b;
    x.resize(static_cast<size_t>(rows) * dims.C(), 0.f);
    a.resize(static_cast<size_t>(rows) * dims.Hv, 0.f);
    b.resize(static_cast<size_t>(rows) * dims.Hv, 0.f);
    std::vector<float> conv_out(static_cast<size_t>(rows) * dims.C());
    ref::ConvShape cs{dims.C(), dims.K, true, st, ref::Store::bf16};
    ref::conv_update(cs, rows, x.data(), dims.C(), slots.data(), conv0.data(), step.conv_weight().data(), nullptr,
                     conv_out.data());
    std::vector<float> q(static_cast<size_t>(rows) * dims.Hk * dims.Dk), k(q.size());
    std::vector<float> v(static_cast<size_t>(rows) * dims.Hv * dims.Dv), g(static_cast<size_t>(rows) * dims.Hv),
        beta(g.size());
    ref::postconv(ref::PostconvShape{dims.Hk, dims.Hv, dims.Dk, dims.Dv, st}, rows, conv_out.data(), dims.C(), a.data(),
                  dims.Hv, b.data(), dims.Hv, step.A_log().data(), step.dt_bias().data(), q.data(), k.data(), v.data(),
                  g.data(), beta.data());
    std::vector<float> ref_out(v.size());
    ref::delta_rule_decode(ref::DeltaShape{dims.Hk, dims.Hv, dims.Dk, dims.Dv, st}, rows, q.data(), k.data(), v.data(),
                           g.data(), beta.data(), slots.data(), ssm0.data(), ref_out.data());

    CHECK(count_diff(test::to_bytes_bf16(conv0), conv1) == 0);
    size_t bad_state = 0, bad_out = 0;
    double worst_state = 0, worst_out = 0;
    for (size_t i = 0; i < ssm0.size(); ++i) {
      double err = std::fabs(ssm1[i] - ssm0[i]), tol = 1e-5 + 1e-4 * std::fabs(ssm0[i]);
      worst_state = std::max(worst_state, err / tol);
      bad_state += !(err <= tol);
    }
    for (size_t i = 0; i < ref_out.size(); ++i) {
      double r = ref_out[i];
      double tol = act == DType::bf16 ? 2 * std::ldexp(1.0, -7) * std::fabs(r) + 1e-4 : 1e-5 + 1e-4 * std::fabs(r);
      double err = std::fabs(out[i] - r);
      worst_out = std::max(worst_out, err / tol);
      bad_out += !(err <= tol);
    }
    INFO("worst state error / tolerance " << worst_state << ", worst output error / tolerance " << worst_out);
    CHECK(bad_state == 0);
    CHECK(bad_out == 0);
  }
}

TEST_CASE("every conv.update, postconv and gdn.decode arm gives the reference arm's bytes", "[gpu][skeleton][arms]") {
  for (DType act : {DType::f32, DType::bf16}) {
    for (GdnDims dims : {dims_4b(), dims_small(), dims_mid(), dims_27b_heads(), dims_wide_group(), dims_no_cluster()}) {
      CAPTURE(dtype_name(act), dims.C());
      Snapshot ref_snap;
      bool first = true;
      for (GdnDecodeArm ga : {GdnDecodeArm::unfused, GdnDecodeArm::fused, GdnDecodeArm::staged, GdnDecodeArm::prep})
        for (ConvUpdateArm cu : {ConvUpdateArm::grid, ConvUpdateArm::fast}) {
          for (PostconvArm pa : {PostconvArm::megablock, PostconvArm::fast}) {
            CAPTURE(arm_name(cu), arm_name(pa), arm_name(ga));
            GdnDecodeOptions o;
            o.act = act;
            o.arms.conv_update = cu;
            o.arms.postconv = pa;
            o.arms.gdn_decode = ga;
            GdnDecodeStep step(dims, o);
            step.capture_all();
            step.randomize_states(3);
            Snapshot start{{}, step.conv_state_bytes(), step.ssm_state_bytes()};
            auto batch = make_batch(dims, 17, 44, o.num_slots);
            Snapshot s = run_once(step, batch, RunMode::graph, start);
            // prep runs as itself on these shapes: its kernel's nodes, and no conv.update or postconv node.
            const Manifest& m = step.manifest(step.keys().back());
            const bool prep_node = std::any_of(m.nodes.begin(), m.nodes.end(), [](const ManifestNode& n) {
              return n.label.op == "conv.update+postconv" && n.label.arm == "prep";
            });
            CHECK(prep_node == (ga == GdnDecodeArm::prep));
            if (first) {
              ref_snap = s;
              first = false;
            } else {
              CHECK(count_diff(s.out, ref_snap.out) == 0);
              CHECK(count_diff(s.conv, ref_snap.conv) == 0);
              CHECK(count_diff(s.ssm, ref_snap.ssm) == 0);
            }
          }
        }
    }
  }
}

TEST_CASE("the manifest names each node's op, arm, kernel and grid", "[gpu][skeleton][manifest]") {
  GdnDecodeOptions o;
  o.arms.conv_update = ConvUpdateArm::grid;
  o.arms.postconv = PostconvArm::megablock;
  GdnDecodeStep step(dims_4b(), o);
  step.capture_all();
  CHECK(step.keys() == std::vector<int>{1, 2, 4, 8, 16, 24, 32});
  for (int key : step.keys()) {
    CAPTURE(key);
    const Manifest& m = step.manifest(key);
    REQUIRE(m.nodes.size() == 3);
    CHECK(m.unlabelled() == 0);
    CHECK(m.arms == o.arms.describe());
    CHECK(m.nodes[0].label.op == "conv.update");
    CHECK(m.nodes[0].label.arm == "grid");
    CHECK(m.nodes[0].kernel.find("conv_update_grid_kernel") != std::string::npos);
    auto cc = conv_update_contract(ConvUpdateArm::grid, ConvUpdateShape{key, step.dims().C(), 4});
    CHECK(m.nodes[0].grid == cc.grid);
    CHECK(m.nodes[0].block == cc.block);
    CHECK(m.nodes[1].label.op == "postconv");
    CHECK(m.nodes[1].kernel.find("postconv_megablock_kernel") != std::string::npos);
    CHECK(m.nodes[1].grid == Dim3{static_cast<unsigned>(key), 17, 1});
    CHECK(m.nodes[1].block == Dim3{256, 1, 1});
    CHECK(m.nodes[2].label.op == "delta_rule.decode");
    // Split 2 in two column blocks a v-head (Dk = Dv = 128): 64 half-width blocks a row, as the
    // unfused contract says.
    const auto dc = gdn_decode_contract(GdnDecodeArm::unfused, GdnDecodeShape{key, 16, 32, 128, 128, 4});
    CHECK(m.nodes[2].grid == Dim3{64, static_cast<unsigned>(key), 1});
    CHECK(m.nodes[2].grid == dc.grid);
    CHECK(m.nodes[2].block == dc.block);
    CHECK(m.nodes[2].cluster == Dim3{1, 1, 1});  // the unfused delta rule: no cluster
    // One stream captured: each kernel waits for the previous one.
    CHECK(m.edges == std::vector<std::pair<int, int>>{{0, 1}, {1, 2}});
    // The nodes' bytes are the ops' (kernels/op_bytes.h, as `stepgraph kernels` counts them) and
    // add up to the step's bandwidth figure. bf16 activations and conv state.
    const GdnDims& d = step.dims();
    CHECK(m.nodes[0].label.bytes == op_bytes::conv_update(key, d.C(), d.K, 2, 2));
    CHECK(m.nodes[1].label.bytes == op_bytes::postconv(key, d.Hk, d.Hv, d.Dk, d.Dv, 2));
    CHECK(m.nodes[2].label.bytes == op_bytes::delta_rule(key, key, d.Hk, d.Hv, d.Dk, d.Dv, 2, sizeof(float)));
    CHECK(step.step_bytes(key) == Approx(m.nodes[0].label.bytes + m.nodes[1].label.bytes + m.nodes[2].label.bytes));
  }
}

TEST_CASE("the fused gdn.decode arm is one node with the recurrence's grid, in clusters", "[gpu][skeleton][manifest]") {
  GdnDecodeOptions o;
  o.arms.gdn_decode = GdnDecodeArm::fused;
  GdnDecodeStep step(dims_4b(), o);
  step.capture_all();
  for (int key : step.keys()) {
    const Manifest& m = step.manifest(key);
    REQUIRE(m.nodes.size() == 1);
    CHECK(m.nodes[0].label.op == "gdn.decode");
    CHECK(m.nodes[0].label.arm == "fused");
    CHECK(m.nodes[0].kernel.find("gdn_decode_fused_kernel") != std::string::npos);
    // 32 v-heads x 2 column blocks; 64 columns x 2 threads per column; clusters of the 4 blocks
    // (2 v-heads x 2 column blocks) of a k-head.
    CHECK(m.nodes[0].grid == Dim3{64, static_cast<unsigned>(key), 1});
    CHECK(m.nodes[0].block == Dim3{128, 1, 1});
    CHECK(m.nodes[0].cluster == Dim3{4, 1, 1});  // read from the captured node's launch attribute
    const auto c = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{key, 16, 32, 128, 128, 4});
    CHECK(c.cluster == m.nodes[0].cluster);
    CHECK(c.grid == m.nodes[0].grid);
    CHECK(m.nodes[0].label.bytes == op_bytes::gdn_decode_fused(key, 16, 32, 128, 128, 4, 2, 2, sizeof(float)));
    CHECK(step.step_bytes(key) == m.nodes[0].label.bytes);
  }
  // The small shape (Dk = 32) is not supported by the fused kernel: the contract falls back.
  auto c = gdn_decode_contract(GdnDecodeArm::fused, GdnDecodeShape{4, 2, 6, 32, 64, 3});
  CHECK(c.arm == GdnDecodeArm::unfused);
  CHECK(c.fallback_reason.find("using unfused") != std::string::npos);
}

// Tagged [cupti]: it cannot run under compute-sanitizer, which holds CUPTI's one subscription.
TEST_CASE("CUPTI times every node of every graph over N replays", "[gpu][skeleton][cupti]") {
  GdnDecodeOptions o;
  GdnDecodeStep step(dims_4b(), o);
  step.capture_all(/*for_timing=*/true);
  const int N = 20;
  for (int key : {1, 32}) {
    CAPTURE(key);
    NodeTimer::instance().start();
    for (int i = 0; i < N; ++i) step.replay(key);
    auto records = NodeTimer::instance().stop();
    int unmatched = -1;
    auto stats = aggregate(step.manifest(key), records, &unmatched);
    REQUIRE(stats.size() == 3);
    for (const auto& n : step.manifest(key).nodes) CHECK(n.cupti_id != 0);
    CHECK(unmatched == 0);
    for (const auto& s : stats) {
      CHECK(s.calls == N);
      CHECK(s.min_us > 0);
      CHECK(s.min_us <= s.median_us);
      CHECK(s.median_us <= s.max_us);
    }
  }
}

TEST_CASE("capture errors name the graph and oversized batches are refused clearly", "[gpu][skeleton][errors]") {
  Stream s;
  try {
    CapturedGraph::capture("bad graph", s.get(), [&] {
      void* p = nullptr;
      check(cudaMalloc(&p, 16));
      check(cudaMemset(p, 0, 16));  // synchronous, legacy stream: illegal during capture
    });
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("bad graph") != std::string::npos);
  }
  // The stream is usable again.
  check(cudaStreamSynchronize(s.get()));

  GdnDecodeOptions o;
  o.max_seqs = 8;
  o.graph_max = 4;
  o.num_slots = 8;
  GdnDecodeStep step(dims_small(), o);
  step.capture_all();
  CHECK(step.keys() == std::vector<int>{1, 2, 4});
  step.run(make_batch(step.dims(), 6, 1, o.num_slots), RunMode::graph);  // no graph fits: eager, counted
  CHECK(step.eager_fallbacks() == 1);
  CHECK_THROWS_AS(step.run(make_batch(step.dims(), 9, 1, 16), RunMode::graph), Error);
  auto dup = make_batch(step.dims(), 2, 1, o.num_slots);
  dup.slots = {3, 3};
  CHECK_THROWS(step.run(dup, RunMode::graph));
}
