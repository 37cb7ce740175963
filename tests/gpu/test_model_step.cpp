// GPU tests of the whole model's decode step (models/model_step.h):
// - with the same HostWeights, the GPU step (graph replay) matches the CPU reference model over 20
//   decode steps from empty slots for a batch of 3 slots ('tiny' and 'tiny-dkdv', f32);
// - greedy tokens (argmax on the GPU) are the exact argmax of the GPU logits and equal the CPU
//   reference's greedy tokens wherever the reference's top-2 margin exceeds the error bound;
// - graph replay is byte-identical to eager for a padded batch of 3 (key 4) and 17 (key 24);
// - padding rows read and write no cache slot and give zero logits and token 0;
// - the manifest labels every kernel the step launches (layer, op, arm).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include <cuda_runtime_api.h>

#include "engine/error.h"
#include "kernels/ref/mlp_ref.h"
#include "models/model_step.h"
#include "models/reference_model.h"
#include "tests/support/byte_diff_count.h"
#include "tests/support/catch.h"
#include "tests/support/logits.h"
#include "tests/support/tolerance.h"

using namespace sg;

namespace {

using test::max_normalised_error;

using test::count_diff;

// A fixed pseudo-random token for (step, row): both models consume the same sequence whatever
// they predict, so one near-tie can never make the two runs diverge.
int32_t token_at(int step, int row, int vocab) {
  uint64_t z = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(step * 131 + row + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<int32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(vocab));
}

// Distinct slots, scrambled.
std::vector<int32_t> slots_for(int B, int num_slots) {
  std::vector<int32_t> s;
  for (int r = 0; r < B; ++r) s.push_back(static_cast<int32_t>((r * 7 + 3) % num_slots));
  return s;
}

}  // namespace

// Tolerance, GPU (f32 activations and weights) vs the CPU reference in f32: normalised max logit
// error per step. In f32 the KV cache is f32 too, so the differences come only from summation
// orders (cuBLAS vs the reference's double accumulation, the norms' tree sums) and expf/log1pf
// ulps: 1e-4. (A bf16 KV cache, which rounds k and v to 2^-9 before the attention reads them,
// needed 2e-2.)
TEST_CASE("model decode step matches the CPU reference from empty slots", "[gpu][model]") {
  for (const char* name : {"tiny", "tiny-dkdv"}) {
    CAPTURE(name);
    const Qwen35Config cfg = preset(name);
    const HostWeights w = synthetic_weights(cfg, 7);
    ModelStepOptions o;
    o.num_slots = 8;
    o.max_context = 32;
    o.max_decode_batch = 8;
    o.act = DType::f32;
    o.synthetic = false;
    ModelStep step(cfg, o);
    step.load_host_weights(w);
    step.capture_all();
    ReferenceModel ref(cfg, w, o.num_slots, o.max_context);
    const double tol = step.kv_cache_dtype() == DType::f32 ? 1e-4 : 2e-2;

    const std::vector<int32_t> slots = {5, 1, 3};
    const int B = 3, V = cfg.vocab;
    double worst = 0;
    int compared = 0;
    for (int t = 0; t < 20; ++t) {
      CAPTURE(t);
      std::vector<DecodeRequest> reqs;
      std::vector<int> rslots;
      std::vector<int64_t> rtoks;
      for (int r = 0; r < B; ++r) {
        const int32_t tok = token_at(t, r, V);
        reqs.push_back({slots[static_cast<size_t>(r)], tok, t});
        rslots.push_back(slots[static_cast<size_t>(r)]);
        rtoks.push_back(tok);
      }
      const DecodeOutput g = step.decode(reqs, RunMode::graph);
      const std::vector<float> c = ref.decode(rslots, rtoks);
      REQUIRE(g.rows == 4);
      REQUIRE(g.logits.size() == c.size());
      const double e = max_normalised_error(g.logits, c);
      worst = std::max(worst, e);
      INFO("normalised max logit error " << e << " (tolerance " << tol << ")");
      CHECK(e <= tol);
      double max_abs = 0;
      for (float x : c) max_abs = std::max(max_abs, double(std::fabs(x)));
      for (int r = 0; r < B; ++r) {
        CAPTURE(r);
        const float* gr = g.logits.data() + static_cast<size_t>(r) * V;
        const float* cr = c.data() + static_cast<size_t>(r) * V;
        // The GPU argmax is exact on the GPU's own logits.
        CHECK(g.tokens[static_cast<size_t>(r)] == ref::argmax(gr, V));
        // And equals the reference's greedy token unless the reference is within the error of a tie.
        if (test::top2_margin(cr, V) > 2.0 * e * max_abs + 1e-6) {
          CHECK(g.tokens[static_cast<size_t>(r)] == ref::argmax(cr, V));
          ++compared;
        }
      }
    }
    WARN(name << ": worst normalised logit error over 20 steps " << worst << ", greedy tokens compared " << compared
              << " of 60");
    CHECK(compared >= 40);  // the comparison must not be vacuous
    CHECK(step.eager_fallbacks() == 0);
  }
}

TEST_CASE("model step graph replay is byte-identical to eager, padded batches included", "[gpu][model][graphs]") {
  for (DType act : {DType::f32, DType::bf16}) {
    CAPTURE(dtype_name(act));
    const Qwen35Config cfg = preset("tiny-dkdv");
    ModelStepOptions o;
    o.num_slots = 32;
    o.max_context = 32;
    o.max_decode_batch = 32;
    o.act = act;
    o.seed = 3;
    ModelStep step(cfg, o);
    step.capture_all();
    step.randomize_caches(11);
    const std::vector<uint8_t> start = step.cache_bytes();
    for (int B : {3, 17}) {
      CAPTURE(B);
      const auto slots = slots_for(B, o.num_slots);
      std::vector<DecodeRequest> reqs;
      for (int r = 0; r < B; ++r) reqs.push_back({slots[static_cast<size_t>(r)], token_at(0, r, cfg.vocab), 5 + r});

      step.set_cache_bytes(start);
      const int re = step.enqueue(reqs, RunMode::eager);
      const auto le = step.logits_bytes(re);
      const auto te = step.tokens(re);
      const auto ce = step.cache_bytes();

      step.set_cache_bytes(start);
      const int rg = step.enqueue(reqs, RunMode::graph);
      const auto lg = step.logits_bytes(rg);
      const auto tg = step.tokens(rg);
      const auto cg = step.cache_bytes();

      CHECK(re == (B == 3 ? 4 : 24));
      CHECK(rg == re);
      CHECK(count_diff(le, lg) == 0);
      CHECK(te == tg);
      CHECK(count_diff(ce, cg) == 0);
      CHECK(count_diff(start, cg) > 0);  // the step wrote the caches (a test that cannot fail is a defect)
    }
    CHECK(step.eager_fallbacks() == 0);
  }
}

TEST_CASE("model step padding rows touch no cache slot and give zero logits", "[gpu][model][padding]") {
  const Qwen35Config cfg = preset("tiny");
  ModelStepOptions o;
  o.num_slots = 32;
  o.max_context = 32;
  o.max_decode_batch = 32;
  o.act = DType::f32;
  ModelStep step(cfg, o);
  step.capture_all();
  step.randomize_caches(5);
  std::vector<std::vector<uint8_t>> before;
  for (int s = 0; s < o.num_slots; ++s) before.push_back(step.slot_cache_bytes(s));
  for (int B : {3, 17}) {
    CAPTURE(B);
    const auto slots = slots_for(B, o.num_slots);
    std::vector<DecodeRequest> reqs;
    for (int r = 0; r < B; ++r) reqs.push_back({slots[static_cast<size_t>(r)], token_at(1, r, cfg.vocab), 7});
    const int rows = step.enqueue(reqs, RunMode::graph);
    REQUIRE(rows > B);
    const std::set<int32_t> live(slots.begin(), slots.end());
    int wrong = 0, live_changed = 0;
    for (int s = 0; s < o.num_slots; ++s) {
      const auto now = step.slot_cache_bytes(s);
      if (live.count(s)) {
        live_changed += count_diff(before[static_cast<size_t>(s)], now) > 0;
        before[static_cast<size_t>(s)] = now;  // the next batch starts from here
      } else {
        wrong += count_diff(before[static_cast<size_t>(s)], now) > 0;
      }
    }
    CHECK(wrong == 0);
    CHECK(live_changed == B);
    // Padding rows: the final norm writes zero rows, so lm_head gives zeros (compared as values:
    // a GEMM of a zero row may legitimately give -0.0).
    const auto bytes = step.logits_bytes(rows);
    std::vector<float> logits(bytes.size() / sizeof(float));
    std::memcpy(logits.data(), bytes.data(), bytes.size());
    CHECK(std::all_of(logits.begin() + static_cast<std::ptrdiff_t>(B) * cfg.vocab, logits.end(),
                      [](float x) { return x == 0.0f; }));
    const auto toks = step.tokens(rows);
    CHECK(std::all_of(toks.begin() + B, toks.end(), [](int32_t t) { return t == 0; }));
  }
}

TEST_CASE(
    "model step with gemm = lt: projections on the tuned cuBLASLt algorithm, named in the manifest, replay == eager",
    "[gpu][model][graphs][gemm]") {
  const Qwen35Config cfg = preset("tiny");
  ModelStepOptions o;
  o.num_slots = 8;
  o.max_context = 32;
  o.max_decode_batch = 8;
  o.gemm = GemmKind::lt;
  ModelStep step(cfg, o);
  step.capture_all();  // the warm-up tunes every projection shape before the captures
  step.randomize_caches(5);
  for (int key : step.keys()) {
    CAPTURE(key);
    int lt = 0;
    for (const auto& n : step.manifest(key).nodes) {
      if (n.label.op == "mlp.gate_up" || n.label.op == "lm_head") {
        CHECK(n.label.arm.rfind("lt algo=", 0) == 0);
        ++lt;
      }
    }
    CHECK(lt >= cfg.layers + 1);
  }
  const std::vector<uint8_t> start = step.cache_bytes();
  const auto slots = slots_for(5, o.num_slots);
  std::vector<DecodeRequest> reqs;
  for (int r = 0; r < 5; ++r) reqs.push_back({slots[static_cast<size_t>(r)], token_at(0, r, cfg.vocab), 3 + r});
  const int re = step.enqueue(reqs, RunMode::eager);
  const auto le = step.logits_bytes(re);
  const auto ce = step.cache_bytes();
  step.set_cache_bytes(start);
  const int rg = step.enqueue(reqs, RunMode::graph);
  CHECK(rg == re);
  CHECK(count_diff(le, step.logits_bytes(rg)) == 0);
  CHECK(count_diff(ce, step.cache_bytes()) == 0);
  CHECK(count_diff(start, ce) > 0);
  CHECK(step.eager_fallbacks() == 0);
}

TEST_CASE("model step manifest labels every kernel it launches", "[gpu][model][manifest]") {
  const Qwen35Config cfg = preset("tiny");
  ModelStepOptions o;
  o.num_slots = 8;
  o.max_context = 32;
  o.max_decode_batch = 8;
  o.gemm = GemmKind::skinny;  // one kernel node per projection (cuBLAS may add a reduction)
  ModelStep step(cfg, o);
  step.capture_all();
  REQUIRE(step.keys() == std::vector<int>{1, 2, 4, 8});
  for (int key : step.keys()) {
    CAPTURE(key);
    const Manifest& m = step.manifest(key);
    std::map<std::string, int> ops;
    int unlabelled_non_gemm = 0;
    for (const auto& n : m.nodes) {
      ++ops[n.label.op];
      // The driver's occupancy answer for every node, and the waves it gives the grid.
      INFO(n.label.op << " " << n.kernel);
      CHECK(n.blocks_per_sm >= 1);
      CHECK(n.waves == Approx(grid_waves(n.grid, n.blocks_per_sm, DeviceLimits::current().sms)));
      CHECK(n.waves > 0);
      // cuBLAS may add more than one kernel per GEMM; the recorder labels the last one only.
      if (n.label.op == "?") {
        INFO("unlabelled kernel " << n.kernel);
        bool cublas = false;
        for (const char* k :
             {"gemm", "gemv", "cutlass", "cublas", "sm90", "splitK", "reduce", "nvjet", "xmma", "Kernel"}) {
          cublas = cublas || n.kernel.find(k) != std::string::npos;
        }
        unlabelled_non_gemm += !cublas;
      }
    }
    CHECK(unlabelled_non_gemm == 0);
    // bf16 decode with gemm = skinny: every projection runs the skinny kernel, one node each.
    REQUIRE(step.options().gemm == GemmKind::skinny);
    for (const auto& n : m.nodes) {
      const std::string& op = n.label.op;
      if (op == "mlp.gate_up" || op == "mlp.down" || op == "gdn.in_proj" || op == "gdn.out_proj" ||
          op == "attn.qkv_proj" || op == "attn.o_proj" || op == "lm_head") {
        CAPTURE(op, n.kernel);
        CHECK(n.label.arm.rfind("skinny bn=", 0) == 0);
        CHECK(n.kernel.find("skinny_gemm_kernel") != std::string::npos);
        // gate_up writes the activation itself (its rows interleaved in 8s: I % 8 == 0 here).
        CHECK((n.label.arm.find("+swiglu") != std::string::npos) == (op == "mlp.gate_up"));
      }
    }
    const int L = cfg.layers, A = cfg.num_full_attention(), G = cfg.num_linear_attention();
    CHECK(ops["embedding"] == 1);
    CHECK(ops["rmsnorm.input"] == L);
    CHECK(ops["rmsnorm.post_attention"] == L);
    CHECK(ops["rmsnorm.final"] == 1);
    CHECK(ops["mlp.gate_up"] == L);
    REQUIRE(cfg.intermediate % 8 == 0);
    CHECK(ops["swiglu"] == 0);  // the SwiGLU epilogue of gate_up
    CHECK(ops["mlp.down"] == L);
    CHECK(ops["gdn.in_proj"] == G);
    CHECK(ops["conv.update"] == G);
    CHECK(ops["postconv"] == G);
    CHECK(ops["delta_rule.decode"] == G);
    CHECK(ops["gated_rmsnorm"] == G);
    CHECK(ops["gdn.out_proj"] == G);
    CHECK(ops["attn.qkv_proj"] == A);
    CHECK(ops["attn_prep"] == A);
    CHECK(ops["attention.decode"] == A);
    CHECK(ops["attn.o_proj"] == A);
    CHECK(ops["lm_head"] == 1);
    CHECK(ops["argmax"] == 1);
    for (const auto& n : m.nodes) {
      if (n.label.op == "conv.update" || n.label.op == "delta_rule.decode") {
        CHECK(n.label.layer >= 0);
        CHECK(!cfg.is_full_attention(n.label.layer));
      }
    }
  }
}

namespace {
// The tiny preset with Dk = Dv = 64 (its own Dk = Dv = 32 leave out the fused gdn.decode arm and the
// delta rule's fused norm, which need 64 or more).
Qwen35Config tiny_d64() {
  Qwen35Config c = preset("tiny");
  c.gdn = GdnDims{2, 4, 64, 64, 4};
  c.validate("test");
  return c;
}
// A small bf16 step: 8 slots of 16 tokens, decode keys up to 4 rows.
ModelStepOptions small_bf16_step() {
  ModelStepOptions o;
  o.num_slots = 8;
  o.max_context = 16;
  o.max_decode_batch = 4;
  o.act = DType::bf16;
  return o;
}
}  // namespace

TEST_CASE("model step with the fused gdn.decode arm gives the unfused bytes", "[gpu][model][arms]") {
  const Qwen35Config c = tiny_d64();
  ModelStepOptions o = small_bf16_step();
  o.gated_norm = GatedNormMode::kernel;  // the unfused path as it was: the delta rule, then the norm kernel
  ModelStep unfused(c, o);
  o.arms.gdn_decode = GdnDecodeArm::fused;
  ModelStep fused(c, o);
  unfused.capture_all();
  fused.capture_all();
  for (int t = 0; t < 4; ++t) {
    CAPTURE(t);
    std::vector<DecodeRequest> reqs = {{2, token_at(t, 0, c.vocab), t}, {6, token_at(t, 1, c.vocab), t}};
    const auto a = unfused.decode(reqs, RunMode::graph);
    const auto b = fused.decode(reqs, RunMode::graph);
    CHECK(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0);
    CHECK(a.tokens == b.tokens);
  }
  CHECK(count_diff(unfused.cache_bytes(), fused.cache_bytes()) == 0);
}

TEST_CASE("model step: SwiGLU in the gate_up GEMM's epilogue gives the swiglu kernel's bytes", "[gpu][model][swiglu]") {
  const Qwen35Config c = preset("tiny");  // I % 8 == 0: gate_up's rows interleaved in 8s
  REQUIRE(c.intermediate % 8 == 0);
  ModelStepOptions o = small_bf16_step();
  o.gemm = GemmKind::skinny;  // every decode gate_up on the skinny kernel
  o.swiglu = SwigluMode::kernel;
  ModelStep kernel(c, o);
  o.swiglu = SwigluMode::gemm;
  ModelStep gemm(c, o);
  kernel.capture_all();
  gemm.capture_all();
  for (int key : gemm.keys()) {  // the node labels say which ran
    int swiglu_nodes = 0, epilogues = 0;
    for (const auto& n : gemm.manifest(key).nodes) {
      swiglu_nodes += n.label.op == "swiglu";
      epilogues += n.label.op == "mlp.gate_up" && n.label.arm.find("+swiglu") != std::string::npos;
    }
    CHECK(swiglu_nodes == 0);
    CHECK(epilogues == c.layers);
    swiglu_nodes = 0;
    for (const auto& n : kernel.manifest(key).nodes) swiglu_nodes += n.label.op == "swiglu";
    CHECK(swiglu_nodes == c.layers);
  }
  for (int t = 0; t < 4; ++t) {
    CAPTURE(t);
    std::vector<DecodeRequest> reqs = {{1, token_at(t, 0, c.vocab), t},
                                       {5, token_at(t, 1, c.vocab), t},
                                       {7, token_at(t, 2, c.vocab), t}};  // 3 live rows of key 4: one padding row
    const auto a = kernel.decode(reqs, RunMode::graph);
    const auto b = gemm.decode(reqs, RunMode::graph);
    CHECK(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0);
    CHECK(a.tokens == b.tokens);
  }
  CHECK(count_diff(kernel.cache_bytes(), gemm.cache_bytes()) == 0);
}

TEST_CASE("model step: the gated norm in the delta rule's epilogue gives the norm kernel's bytes",
          "[gpu][model][gated_norm]") {
  const Qwen35Config c = tiny_d64();  // Dv = 64: the norm kernel's 16-byte path, which the fused norm reproduces
  ModelStepOptions o = small_bf16_step();
  o.gated_norm = GatedNormMode::kernel;
  ModelStep kernel(c, o);
  o.gated_norm = GatedNormMode::delta;
  ModelStep delta(c, o);
  kernel.capture_all();
  delta.capture_all();
  const int G = c.num_linear_attention();
  for (int key : delta.keys()) {  // the node labels say which ran
    CAPTURE(key);
    int norms = 0, fused = 0;
    for (const auto& n : delta.manifest(key).nodes) {
      norms += n.label.op == "gated_rmsnorm";
      fused += n.label.op == "delta_rule.decode" && n.label.arm == "+gated_rmsnorm";
    }
    CHECK(norms == 0);
    CHECK(fused == G);
    norms = 0;
    for (const auto& n : kernel.manifest(key).nodes) norms += n.label.op == "gated_rmsnorm";
    CHECK(norms == G);
  }
  for (int t = 0; t < 4; ++t) {
    CAPTURE(t);
    std::vector<DecodeRequest> reqs = {{1, token_at(t, 0, c.vocab), t},
                                       {5, token_at(t, 1, c.vocab), t},
                                       {7, token_at(t, 2, c.vocab), t}};  // 3 live rows of key 4: one padding row
    const auto a = kernel.decode(reqs, RunMode::graph);
    const auto b = delta.decode(reqs, t % 2 ? RunMode::eager : RunMode::graph);
    CHECK(std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)) == 0);
    CHECK(a.tokens == b.tokens);
  }
  CHECK(count_diff(kernel.cache_bytes(), delta.cache_bytes()) == 0);
}

TEST_CASE("model step that cannot fit says so with the sizes and holds no device memory afterwards",
          "[gpu][model][memory]") {
  // The 27B preset's KV and delta-rule caches for 4096 slots of 8192 tokens need terabytes.
  ModelStepOptions o;
  o.num_slots = 4096;
  o.max_context = 8192;
  o.synthetic = false;
  size_t free_before = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  std::string msg;
  try {
    ModelStep step(preset("qwen3.5-27b"), o);
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("plan needs") != std::string::npos);
  CHECK(msg.find("free") != std::string::npos);
  CHECK(msg.find("TB") != std::string::npos);  // the plan's total, in the plan's own units
  size_t free_after = 0;
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_after + (64u << 20) >= free_before);  // nothing held (64 MiB slack for the context)
}
