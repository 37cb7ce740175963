// GPU tests of the model step with a bf16 recurrent (SSM) state (ModelStepOptions::ssm_state, the
// ssm-state setting; step_settings.h):
// - the state is laid out in bf16 (half the SSM bytes of the f32 step) and the manifest's delta-rule
//   nodes count the bf16 state's bytes;
// - prefill (scan) then decode tracks the CPU reference kept with a bf16 state, and is clearly
//   closer to it than to the f32-state reference (so the rounding happens, at the reference's points);
// - decode and prefill graph replay equal eager byte for byte (every delta-rule prefill form), with
//   padded batches;
// - the fused and the staged gdn.decode arms give the unfused path's bytes with a bf16 state (arms
//   are byte-identical).
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/contracts.h"
#include "kernels/op_bytes.h"
#include "models/model_step.h"
#include "models/reference_model.h"
#include "tests/support/catch.h"

#include "tests/gpu/model_prefill_fixture.h"

using namespace sg;
using namespace sg::test::mp;

namespace {

ModelStepOptions bf16_state(ModelStepOptions o) {
  o.ssm_state = DType::bf16;
  return o;
}

std::vector<DecodeRequest> decode_batch(const std::vector<int32_t>& slots, const std::vector<int32_t>& pos, int t,
                                        int V) {
  std::vector<DecodeRequest> reqs;
  for (size_t r = 0; r < slots.size(); ++r) {
    reqs.push_back({slots[r], tokens_for(200 + t, 1, V, static_cast<int>(r))[0], pos[r] + t});
  }
  return reqs;
}

// Dk = Dv = 64: a shape the fused gdn.decode arm takes (Dk 64 or 128).
Qwen35Config tiny_d64() {
  Qwen35Config c = preset("tiny");
  c.gdn = GdnDims{2, 4, 64, 64, 4};
  c.validate("test");
  return c;
}

}  // namespace

TEST_CASE("model step with a bf16 SSM state: half the state bytes, counted in the manifest",
          "[gpu][model][ssm_state]") {
  const Qwen35Config cfg = preset("tiny-dkdv");
  ModelStepOptions o = prefill_options(DType::bf16);
  o.synthetic = true;
  ModelStep f32(cfg, o);
  ModelStep bf16(cfg, bf16_state(o));
  CHECK(bf16.options().ssm_state == DType::bf16);
  const GdnDims& g = cfg.gdn;
  const size_t ssm_f32 = static_cast<size_t>(cfg.num_linear_attention()) * o.num_slots * g.Hv * g.Dk * g.Dv * 4;
  CHECK(f32.cache_bytes().size() - bf16.cache_bytes().size() == ssm_f32 / 2);
  bf16.capture_all();
  const int key = bf16.keys().back();
  int delta = 0;
  for (const auto& n : bf16.manifest(key).nodes) {
    if (n.label.op != "delta_rule.decode") continue;
    ++delta;
    CHECK(n.label.bytes ==
          op_bytes::delta_rule(key, key, g.Hk, g.Hv, g.Dk, g.Dv, 2, 2) +
              (n.label.arm == "+gated_rmsnorm" ? op_bytes::fused_gated_norm(key, g.Hv, g.Dv, 2, 2) : 0));
  }
  CHECK(delta == cfg.num_linear_attention());
  // The prefill's delta-rule nodes: the f32 step's bytes less half of its states' (one state a
  // sequence of the bucket, read and written).
  f32.capture_all();
  const GraphKey pk = GraphKey::prefill(bf16.prefill_keys().back());
  const auto& nb = bf16.graphs().manifest(pk).nodes;
  const auto& nf = f32.graphs().manifest(pk).nodes;
  REQUIRE(nb.size() == nf.size());
  int prefill = 0;
  for (size_t i = 0; i < nb.size(); ++i) {
    if (nb[i].label.op != "delta_rule.prefill") continue;
    ++prefill;
    REQUIRE(nf[i].label.op == "delta_rule.prefill");
    CHECK(nf[i].label.bytes - nb[i].label.bytes == 2.0 * o.max_prefill_seqs * g.Hv * g.Dk * g.Dv * (4 - 2));
  }
  CHECK(prefill == cfg.num_linear_attention());
}

// Tolerance: the GPU and the reference round the same f32 values to bf16 at the same points, but
// their f32 values differ by summation orders (1e-6 relative, the f32 tolerance's source), so now
// and then one state element rounds to the neighbouring bf16 value (2^-8 relative) and the two
// states drift apart by such steps: 2e-3 on the normalised max logit error, 20x the f32 step's
// bound. The discriminating check is the second: the f32-state reference is at least twice as far.
TEST_CASE("model step with a bf16 SSM state tracks the CPU reference's bf16 state", "[gpu][model][ssm_state]") {
  for (const char* name : {"tiny", "tiny-dkdv"}) {
    CAPTURE(name);
    const Qwen35Config cfg = preset(name);
    const HostWeights w = synthetic_weights(cfg, 11);
    ModelStep step(cfg, bf16_state(prefill_options(DType::f32)));
    step.load_host_weights(w);
    step.capture_all();
    REQUIRE(step.kv_cache_dtype() == DType::f32);  // f32 activations: f32 KV cache, no bf16 rounding but the state's
    ReferenceOptions ro;
    ro.ssm_state = ref::Store::bf16;
    ReferenceModel rb(cfg, w, 8, 160, ro);
    ReferenceModel rf(cfg, w, 8, 160);
    const int V = cfg.vocab;
    const std::vector<int32_t> slots = {1, 5, 6}, lens = {7, 33, 19};
    std::vector<PrefillRequest> batch;
    for (size_t i = 0; i < slots.size(); ++i) batch.push_back({slots[i], tokens_for(slots[i], lens[i], V), 0});
    const PrefillOutput p = step.prefill(batch, RunMode::graph);
    double to_bf16 = 0, to_f32 = 0, worst = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      const std::vector<float> cb = rb.prefill({Sequence{slots[i], widen(batch[i].tokens)}});
      const std::vector<float> cf = rf.prefill({Sequence{slots[i], widen(batch[i].tokens)}});
      const double eb = normalised_error(p.logits.data() + i * V, cb.data(), V);
      worst = std::max(worst, eb);
      to_bf16 += eb;
      to_f32 += normalised_error(p.logits.data() + i * V, cf.data(), V);
    }
    for (int t = 0; t < 12; ++t) {
      CAPTURE(t);
      const auto reqs = decode_batch(slots, lens, t, V);
      std::vector<int> rs(slots.begin(), slots.end());
      std::vector<int64_t> rt;
      for (const auto& r : reqs) rt.push_back(r.token);
      const DecodeOutput d = step.decode(reqs, RunMode::graph);
      const std::vector<float> cb = rb.decode(rs, rt), cf = rf.decode(rs, rt);
      const double eb = normalised_error(d.logits.data(), cb.data(), cb.size());
      worst = std::max(worst, eb);
      to_bf16 += eb;
      to_f32 += normalised_error(d.logits.data(), cf.data(), cf.size());
    }
    WARN(name << ": worst normalised logit error against the bf16-state reference " << worst
              << "; summed errors against it " << to_bf16 << ", against the f32-state reference " << to_f32);
    CHECK(worst <= 2e-3);
    CHECK(to_f32 >= 2.0 * to_bf16);
    CHECK(step.eager_fallbacks() == 0);
  }
}

TEST_CASE("model step with a bf16 SSM state: graph replay equals eager, decode and every prefill form",
          "[gpu][model][ssm_state][graphs]") {
  const Qwen35Config cfg = preset("tiny-dkdv");
  const int V = cfg.vocab;
  for (DeltaPrefill dp : {DeltaPrefill::scan, DeltaPrefill::chunked, DeltaPrefill::mma}) {
    CAPTURE(delta_prefill_name(dp));
    ModelStepOptions o = bf16_state(prefill_options(DType::bf16, dp));
    o.synthetic = true;
    ModelStep step(cfg, o);
    step.capture_all();
    step.randomize_caches(5);
    const std::vector<uint8_t> start = step.cache_bytes();
    const std::vector<uint8_t> eager_cache = check_prefill_replay(
        step, {{3, tokens_for(1, 21, V), 10}, {0, tokens_for(2, 2, V), 30}, {6, tokens_for(3, 40, V), 0}});
    CHECK(eager_cache != start);  // the prefill wrote the caches

    // Decode: 3 live rows of key 4 (one padding row).
    const std::vector<int32_t> slots = {3, 0, 6}, pos = {31, 32, 40};
    const std::vector<uint8_t> before = step.cache_bytes();
    const auto reqs = decode_batch(slots, pos, 0, V);
    const DecodeOutput de = step.decode(reqs, RunMode::eager);
    const std::vector<uint8_t> after_eager = step.cache_bytes();
    step.set_cache_bytes(before);
    const DecodeOutput dg = step.decode(reqs, RunMode::graph);
    CHECK(de.rows == 4);
    CHECK(std::memcmp(de.logits.data(), dg.logits.data(), de.logits.size() * sizeof(float)) == 0);
    CHECK(de.tokens == dg.tokens);
    CHECK(after_eager == step.cache_bytes());
    CHECK(after_eager != before);
    CHECK(step.eager_fallbacks() == 0);
  }
}

TEST_CASE("model step with a bf16 SSM state: the fused gdn.decode arm gives the unfused bytes",
          "[gpu][model][ssm_state][arms]") {
  const Qwen35Config cfg = tiny_d64();
  const int V = cfg.vocab;
  ModelStepOptions o = bf16_state(prefill_options(DType::bf16));
  o.synthetic = true;
  o.gated_norm = GatedNormMode::kernel;  // the unfused path: the delta rule, then the norm kernel
  ModelStep unfused(cfg, o);
  o.arms.gdn_decode = GdnDecodeArm::fused;
  ModelStep fused(cfg, o);
  unfused.capture_all();
  fused.capture_all();
  int fused_nodes = 0;  // the arm must run (its contract could fall back to the unfused kernels)
  for (const auto& n : fused.manifest(fused.keys().front()).nodes) {
    fused_nodes += n.label.op == "gdn.decode" && n.label.arm == "fused";
  }
  CHECK(fused_nodes == cfg.num_linear_attention());
  unfused.randomize_caches(9);
  fused.set_cache_bytes(unfused.cache_bytes());
  const std::vector<int32_t> slots = {2, 6}, pos = {3, 9};
  for (int t = 0; t < 4; ++t) {
    CAPTURE(t);
    const auto reqs = decode_batch(slots, pos, t, V);
    const auto a = unfused.decode(reqs, RunMode::graph);
    const auto b = fused.decode(reqs, RunMode::graph);
    CHECK(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0);
    CHECK(a.tokens == b.tokens);
  }
  CHECK(unfused.cache_bytes() == fused.cache_bytes());
}

// Dk = Dv = 128 (split 2, one block a head): steps of more than 8 rows run the delta rule
// without the fused norm, so a bf16 state takes the column-pair kernel; at most 8 rows fuse the norm
// and keep one column a thread group. The manifest shows which kernel ran, on the contract's grid and
// block.
TEST_CASE("model step with a bf16 SSM state: the delta rule's kernel and launch are the contract's",
          "[gpu][model][ssm_state][manifest]") {
  Qwen35Config cfg = preset("tiny");
  cfg.gdn = GdnDims{2, 4, 128, 128, 4};  // z's row stride 16-byte aligned: the norm can fuse
  cfg.validate("test");
  ModelStepOptions o = bf16_state(prefill_options(DType::bf16));
  o.synthetic = true;
  o.num_slots = 16;
  o.max_decode_batch = 16;
  ModelStep step(cfg, o);
  step.capture_all();
  const GdnDims& g = cfg.gdn;
  int pairs = 0, columns = 0;
  for (int key : step.keys()) {
    CAPTURE(key);
    for (const auto& n : step.manifest(key).nodes) {
      if (n.label.op != "delta_rule.decode") continue;
      const bool norm = n.label.arm == "+gated_rmsnorm";
      CHECK(norm == (key <= 8));  // delta_fuses_gated_norm: up to kGatedNormFusedMaxRows
      const auto c =
          gdn_decode_contract(GdnDecodeArm::unfused, GdnDecodeShape{key, g.Hk, g.Hv, g.Dk, g.Dv, g.K, 2, norm});
      CHECK(n.grid == c.grid);
      CHECK(n.block == c.block);
      const bool paired = n.kernel.find("delta_rule_decode_pair_kernel") != std::string::npos;
      CHECK(paired == !norm);
      CHECK(n.block == Dim3{norm ? 256u : 128u, 1, 1});  // 128 columns x 2 threads; 64 pairs x 2 threads
      (paired ? pairs : columns) += 1;
    }
  }
  CHECK(pairs == cfg.num_linear_attention());  // key 16
  CHECK(columns >= cfg.num_linear_attention());
}

// The staged gdn.decode arm (persistent delta-rule blocks that stage the next head's state in
// shared memory) with a bf16 state, in column pairs at split 2 (Dk = Dv = 128): the unfused bytes,
// logits and caches, at every key; its delta-rule nodes are labelled and run the staged kernel
// (the gated norm left to its kernel, so that it runs at every key).
TEST_CASE("model step with a bf16 SSM state: the staged gdn.decode arm gives the unfused bytes",
          "[gpu][model][ssm_state][arms]") {
  Qwen35Config cfg = preset("tiny");
  cfg.gdn = GdnDims{2, 4, 128, 128, 4};
  cfg.validate("test");
  ModelStepOptions o = bf16_state(prefill_options(DType::bf16));
  o.synthetic = true;
  o.num_slots = 16;
  o.max_decode_batch = 16;
  o.gated_norm = GatedNormMode::kernel;
  ModelStep unfused(cfg, o);
  o.arms.gdn_decode = GdnDecodeArm::staged;
  ModelStep staged(cfg, o);
  unfused.capture_all();
  staged.capture_all();
  int nodes = 0;
  for (int key : staged.keys()) {
    for (const auto& n : staged.manifest(key).nodes) {
      if (n.label.op != "delta_rule.decode") continue;
      ++nodes;
      CHECK(n.label.arm == "staged");
      CHECK(n.kernel.find("delta_rule_decode_staged_kernel") != std::string::npos);
    }
  }
  CHECK(nodes == cfg.num_linear_attention() * static_cast<int>(staged.keys().size()));
  for (int t = 0; t < 3; ++t) {
    CAPTURE(t);
    std::vector<DecodeRequest> reqs;
    for (int r = 0; r < 11; ++r) reqs.push_back({15 - r, static_cast<int32_t>((31 * t + 7 * r) % cfg.vocab), t});
    const auto a = unfused.decode(reqs, RunMode::graph);
    const auto b = staged.decode(reqs, RunMode::graph);
    CHECK(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0);
    CHECK(a.tokens == b.tokens);
  }
  const auto ca = unfused.cache_bytes(), cb = staged.cache_bytes();
  REQUIRE(ca.size() == cb.size());
  CHECK(std::memcmp(ca.data(), cb.data(), ca.size()) == 0);
}
