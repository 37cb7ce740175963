// CPU tests of the device memory plan (models/memory_plan.h), which is the model step's own layout
// (models/step_layout.h) run on a measuring arena: totals for the 4B, 27B and tiny presets against
// numbers computed here by hand from docs/MODEL.md, the plan against the arena it came from, the
// per-layer grouping, the table and check_fits' error.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/arena.h"
#include "engine/error.h"
#include "engine/tensor.h"
#include "kernels/delta_rule_records.h"
#include "models/memory_plan.h"
#include "models/step_layout.h"
#include "models/step_metadata.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

uint64_t a256(uint64_t b) { return (b + 255) / 256 * 256; }

bool within(double got, double want, double rel) { return std::abs(got - want) <= rel * want; }

size_t sum_categories(const MemoryPlan& p) {
  size_t s = 0;
  for (int i = 0; i < kMemoryCategories; ++i) s += p.bytes_of(static_cast<MemoryCategory>(i));
  return s;
}

const MemoryEntry* entry(const MemoryPlan& p, const std::string& name) {
  const auto it =
      std::find_if(p.entries.begin(), p.entries.end(), [&](const MemoryEntry& e) { return e.name == name; });
  return it == p.entries.end() ? nullptr : &*it;
}

// 32 slots of 1024 tokens, decode keys up to 32 rows, a prefill of 32 x 1024 tokens; no workspaces
// beyond the layout's minimum views.
StepLayoutParams decode_b32() {
  StepLayoutParams p;
  p.num_slots = 32;
  p.max_context = 1024;
  p.max_decode_batch = 32;
  p.max_prefill_tokens = 32768;
  p.max_prefill_seqs = 32;
  p.meta_bytes = step_meta_bytes(32, 32768, 32);
  return p;
}

}  // namespace

TEST_CASE("4B plan: 8.41 GB of weights, 1.61 GB of SSM state, 1.07 GB of KV at 32 x 1024", "[memory]") {
  const Qwen35Config c = preset("qwen3.5-4b");
  const MemoryPlan p = plan_memory(c, decode_b32());
  // docs/MODEL.md shapes: H 2560, I 9216, V 248320, C 8192, Hv*Dv 4096, Hq*D 4096, Hkv*D 1024; the
  // projections fused as the kernels read them (in_proj = qkv | z | b | a, qkv_proj = q+gate | k | v,
  // gate_up); conv1d, A_log and dt_bias in f32; every tensor padded to 256 bytes.
  const uint64_t H = 2560, I = 9216, V = 248320;
  const uint64_t gdn = (8192 + 4096 + 64) * H * 2 + 8192 * 4 * 4 + 256 + 256 + a256(128 * 2) + H * 4096 * 2;
  const uint64_t attn = (8192 + 2048) * H * 2 + a256(256 * 2) * 2 + H * 4096 * 2;
  const uint64_t mlp_norms = 3 * I * H * 2 + 2 * a256(H * 2);
  const uint64_t weights = V * H * 2 + a256(H * 2) + 24 * (gdn + mlp_norms) + 8 * (attn + mlp_norms);
  CHECK(p.bytes_of(MemoryCategory::weights) == weights);
  // docs/BENCHMARKS.md: "the 4B decode-b32 step reads 8.41 GB of weights" (the tied lm_head once).
  CHECK(within(static_cast<double>(weights), 8.41e9, 0.01));
  REQUIRE(entry(p, "embed_tokens") != nullptr);
  CHECK(entry(p, "lm_head") == nullptr);  // tied
  REQUIRE(entry(p, "layers.*.linear_attn.in_proj") != nullptr);
  CHECK(entry(p, "layers.*.linear_attn.in_proj")->count == 24);
  CHECK(entry(p, "layers.*.linear_attn.in_proj")->shape == "[12352, 2560] bf16");
  CHECK(entry(p, "layers.*.self_attn.qkv_proj")->count == 8);
  CHECK(entry(p, "layers.*.mlp.gate_up")->count == 32);

  // SSM state: 24 layers x 32 slots x [32, 128, 128] f32; the step reads and writes it: 3.22 GB.
  const uint64_t ssm = 24ull * 32 * 32 * 128 * 128 * 4;
  CHECK(p.bytes_of(MemoryCategory::ssm_state) == ssm);
  CHECK(within(2.0 * static_cast<double>(ssm), 3.22e9, 0.01));
  // KV: 8 layers x 32 slots x 1024 x [4, 256] x (K, V) x bf16 = 1.07 GB.
  const uint64_t kv = 8ull * 32 * 1024 * 4 * 256 * 2 * 2;
  CHECK(kv == 1073741824ull);
  CHECK(p.bytes_of(MemoryCategory::kv_cache) == kv);
  CHECK(p.bytes_of(MemoryCategory::conv_state) == 24ull * 32 * 8192 * 3 * 2);

  // Activations for R = 32768 rows (L = 32 logit rows): x, h, mix; the shared projection output of
  // the widest projection (gate_up, 2I); the MLP activation; the GDN scratch (conv out, q, k, v, g,
  // beta, core); the attention scratch (q, gate, out); the rotary table; logits and tokens.
  const uint64_t R = 32768, L = 32;
  const uint64_t acts = 3 * R * H * 2 + R * 2 * I * 2 + R * I * 2 +
                        (R * 8192 * 2 + 2 * R * 16 * 128 * 2 + R * 32 * 128 * 2 + 2 * R * 32 * 4 + R * 4096 * 2) +
                        3 * R * 16 * 256 * 2 + 1024 * 64 * 4 + L * V * 4 + a256(L * 4);
  CHECK(p.bytes_of(MemoryCategory::activations) == acts);
  // Workspaces (none asked for): the minimum views, and one GEMM counter per 64 rows of the widest
  // weight (the lm_head's V rows).
  CHECK(p.bytes_of(MemoryCategory::workspace) == 4 * 256 + a256((V + 63) / 64 * 4));
  CHECK(p.bytes_of(MemoryCategory::step_metadata) == a256(step_meta_bytes(32, 32768, 32)));
  CHECK(step_meta_bytes(32, 32768, 32) == metadata_layout(StepKey::prefill(32768, 32)).total);

  CHECK(sum_categories(p) == p.total);
  size_t by_entry = 0;
  for (const MemoryEntry& e : p.entries) by_entry += e.bytes;
  CHECK(by_entry == p.total);

  // --ssm-state bf16: the SSM state halves, nothing else moves.
  StepLayoutParams half = decode_b32();
  half.ssm_state = DType::bf16;
  const MemoryPlan h = plan_memory(c, half);
  CHECK(h.bytes_of(MemoryCategory::ssm_state) == ssm / 2);
  CHECK(h.total == p.total - ssm / 2);
  REQUIRE(entry(h, "layers.*.ssm_state") != nullptr);
  CHECK(entry(h, "layers.*.ssm_state")->shape == "[32, 32, 128, 128] bf16");

  // --delta-prefill wgmma-t: its chunk records, (32768 / 64 + 32) x 32 v-heads x 19,712 bytes, are a
  // workspace of their own; nothing else moves.
  StepLayoutParams two = decode_b32();
  two.delta_workspace_bytes = delta_records::workspace_bytes(32768, 32, 32);
  CHECK(two.delta_workspace_bytes == uint64_t{544} * 32 * 19712);
  const MemoryPlan t = plan_memory(c, two);
  REQUIRE(entry(t, "gdn.delta_workspace") != nullptr);
  CHECK(entry(t, "gdn.delta_workspace")->category == MemoryCategory::workspace);
  CHECK(t.bytes_of(MemoryCategory::workspace) == p.bytes_of(MemoryCategory::workspace) + two.delta_workspace_bytes);
  CHECK(t.total == p.total + two.delta_workspace_bytes);

  // --mix-round norm: the residual projections' f32 output for steps of up to 32 rows, [32, H] f32
  // among the activations; nothing else moves.
  StepLayoutParams f32mix = decode_b32();
  f32mix.mix_f32_rows = 32;
  const MemoryPlan f = plan_memory(c, f32mix);
  REQUIRE(entry(f, "mix_f32") != nullptr);
  CHECK(entry(f, "mix_f32")->shape == "[32, 2560] f32");
  CHECK(entry(p, "mix_f32") == nullptr);
  CHECK(f.bytes_of(MemoryCategory::activations) == acts + 32 * H * 4);
  CHECK(f.total == p.total + 32 * H * 4);
}

TEST_CASE("the plan is the arena the layout carves", "[memory]") {
  for (const char* name : {"qwen3.5-4b", "qwen3.5-27b", "tiny", "tiny-dkdv"}) {
    CAPTURE(name);
    const Qwen35Config c = preset(name);
    StepLayoutParams p = decode_b32();
    p.attn_workspace_bytes = 1000;  // workspaces as a caller sizes them
    p.argmax_workspace_bytes = 5000;
    p.gemm_workspace_bytes = [](int n, int k) { return static_cast<size_t>(n) * 8 + static_cast<size_t>(k); };
    Arena m = Arena::measure();
    const StepTensors t = lay_out_step(m, c, p);
    const MemoryPlan plan = plan_of(m);
    CHECK(plan.total == a256(m.used()));  // every tensor starts at a 256-byte boundary
    CHECK(plan.total == plan_memory(c, p).total);
    // The views have the layout's shapes; the workspaces the caller's sizes.
    CHECK(t.layers.size() == static_cast<size_t>(c.layers));
    CHECK(t.a.logits.dim(0) == 32);
    CHECK(t.a.logits.dim(1) == c.vocab);
    CHECK(t.a.proj.numel() == int64_t{32768} * step_proj_width(c));
    CHECK(t.a.argmax_ws.bytes() == 5000);
    if (c.num_full_attention() > 0) CHECK(t.a.attn_ws.bytes() == 1000);
    const int64_t widest = std::max<int64_t>(t.lm_head.dim(0), 2 * c.intermediate);
    CHECK(t.a.gemm_ws.bytes() >= static_cast<size_t>(widest) * 8);
    CHECK(t.a.meta.bytes() == p.meta_bytes);
    // In order, without overlap.
    for (size_t i = 1; i < m.entries().size(); ++i) {
      CHECK(m.entries()[i].offset >= m.entries()[i - 1].offset + m.entries()[i - 1].bytes);
    }
  }
}

TEST_CASE("27B plan: 51.2 GB of weights read per step, 4.83 GB of SSM state, 2.15 GB of KV", "[memory]") {
  const Qwen35Config c = preset("qwen3.5-27b");
  const MemoryPlan p = plan_memory(c, decode_b32());
  // H 5120, I 17408, C 10240, Hv*Dv 6144, Hq*D 6144, Hkv*D 1024, untied lm_head.
  const uint64_t H = 5120, I = 17408, V = 248320;
  const uint64_t gdn = (10240 + 6144 + 96) * H * 2 + 10240 * 4 * 4 + 256 + 256 + 256 + H * 6144 * 2;
  const uint64_t attn = (12288 + 2048) * H * 2 + 2 * 512 + H * 6144 * 2;
  const uint64_t mlp_norms = 3 * I * H * 2 + 2 * a256(H * 2);
  const uint64_t embed = V * H * 2;
  const uint64_t weights = 2 * embed + a256(H * 2) + 48 * (gdn + mlp_norms) + 16 * (attn + mlp_norms);
  CHECK(p.bytes_of(MemoryCategory::weights) == weights);
  // The 27B step reads 51.2 GB of weights: everything but the input embedding, of which a step
  // gathers only its tokens' rows.
  CHECK(within(static_cast<double>(weights - embed), 51.2e9, 0.01));
  CHECK(entry(p, "lm_head") != nullptr);
  CHECK(entry(p, "embed_tokens") != nullptr);

  const uint64_t ssm = 48ull * 32 * 48 * 128 * 128 * 4;
  CHECK(p.bytes_of(MemoryCategory::ssm_state) == ssm);
  CHECK(within(2.0 * static_cast<double>(ssm), 9.66e9, 0.01));
  const uint64_t kv = 16ull * 32 * 1024 * 4 * 256 * 2 * 2;
  CHECK(p.bytes_of(MemoryCategory::kv_cache) == kv);
  CHECK(within(static_cast<double>(kv), 2.15e9, 0.01));
  CHECK(sum_categories(p) == p.total);
}

TEST_CASE("tiny plan matches a by-hand count with 256-byte padding", "[memory]") {
  const Qwen35Config c = preset("tiny");  // H 64, 6 layers (4 GDN, 2 attention), I 128, V 256, untied
  StepLayoutParams o;
  o.num_slots = 4;
  o.max_context = 128;
  o.max_decode_batch = 4;
  o.max_prefill_tokens = 64;
  o.max_prefill_seqs = 4;
  o.meta_bytes = step_meta_bytes(4, 64, 4);
  const MemoryPlan p = plan_memory(c, o);
  // GDN: Hk 2, Hv 4, Dk = Dv = 32, K 4, C = 256: in_proj [256 + 128 + 8, 64].
  const uint64_t gdn = a256(392 * 64 * 2) + a256(256 * 4 * 4) + 2 * a256(4 * 4) + a256(32 * 2) + a256(64 * 128 * 2);
  // Attention: Hq 4, Hkv 2, D 32: qkv_proj [2*128 + 2*64, 64].
  const uint64_t attn = a256(384 * 64 * 2) + 2 * a256(32 * 2) + a256(64 * 128 * 2);
  const uint64_t per_layer = 2 * a256(64 * 2) + a256(256 * 64 * 2) + a256(64 * 128 * 2);
  const uint64_t weights = 2 * a256(256 * 64 * 2) + a256(64 * 2) + 6 * per_layer + 4 * gdn + 2 * attn;
  CHECK(p.bytes_of(MemoryCategory::weights) == weights);
  CHECK(p.bytes_of(MemoryCategory::conv_state) == 4 * a256(4 * 256 * 3 * 2));
  CHECK(p.bytes_of(MemoryCategory::ssm_state) == 4 * a256(4 * 4 * 32 * 32 * 4));
  CHECK(p.bytes_of(MemoryCategory::kv_cache) == 2 * 2 * a256(4 * 128 * 2 * 32 * 2));
  CHECK(p.bytes_of(MemoryCategory::step_metadata) ==
        a256(std::max(metadata_layout(StepKey::decode(4)).total, metadata_layout(StepKey::prefill(64, 4)).total)));
  CHECK(sum_categories(p) == p.total);

  SECTION("a tied preset counts the embedding once") {
    const MemoryPlan t = plan_memory(preset("tiny-dkdv"), o);
    CHECK(entry(t, "embed_tokens") != nullptr);
    CHECK(entry(t, "lm_head") == nullptr);
  }
  SECTION("larger options never shrink any category") {
    StepLayoutParams big = o;
    big.num_slots = 8;
    big.max_context = 256;
    big.max_prefill_tokens = 128;
    big.meta_bytes = step_meta_bytes(4, 128, 4);
    const MemoryPlan q = plan_memory(c, big);
    for (int i = 0; i < kMemoryCategories; ++i) {
      const auto cat = static_cast<MemoryCategory>(i);
      CAPTURE(category_name(cat));
      CHECK(q.bytes_of(cat) >= p.bytes_of(cat));
    }
    CHECK(q.bytes_of(MemoryCategory::kv_cache) == 4 * p.bytes_of(MemoryCategory::kv_cache));
  }
  SECTION("no prefill step: activations for the decode rows only") {
    StepLayoutParams d = o;
    d.max_prefill_tokens = 0;
    d.meta_bytes = step_meta_bytes(4, 0, 4);
    CHECK(plan_memory(c, d).bytes_of(MemoryCategory::activations) < p.bytes_of(MemoryCategory::activations));
  }
  SECTION("bad counts are errors") {
    StepLayoutParams b = o;
    b.num_slots = 0;
    CHECK_THROWS_WITH(plan_memory(c, b), "plan_memory: num_slots must be >= 1, got 0");
    b = o;
    b.max_prefill_tokens = -1;
    CHECK_THROWS_WITH(plan_memory(c, b), "plan_memory: max_prefill_tokens must be >= 0, got -1");
  }
}

TEST_CASE("plan_of groups per-layer tensors and refuses an unknown section", "[memory]") {
  Arena m = Arena::measure();
  m.section("weights");
  m.take("layers.0.w", DType::bf16, {10, 10});
  m.take("layers.1.w", DType::bf16, {10, 10});
  m.take("layers.12.w", DType::bf16, {10, 20});  // another shape: its own entry
  m.take("layersX.w", DType::bf16, {1});
  m.section("workspace");
  m.take("scratch", DType::f32, {1000});
  const MemoryPlan p = plan_of(m);
  REQUIRE(p.entries.size() == 4);
  CHECK(p.entries[0].name == "layers.*.w");
  CHECK(p.entries[0].count == 2);
  CHECK(p.entries[0].shape == "[10, 10] bf16");
  CHECK(p.entries[0].bytes == 512);
  CHECK(p.entries[1].name == "layers.*.w");
  CHECK(p.entries[1].shape == "[10, 20] bf16");
  CHECK(p.entries[2].name == "layersX.w");
  CHECK(p.entries[3].category == MemoryCategory::workspace);
  CHECK(p.entries[3].bytes == 4096);
  CHECK(p.total == 512 + 512 + 256 + 4096);
  Arena bad = Arena::measure();
  bad.section("caches");
  bad.take("x", DType::f32, {1});
  CHECK_THROWS_WITH(plan_of(bad), "memory plan: 'x' was taken under section 'caches', which is not a memory category");
}

TEST_CASE("the plan table lists every entry and the per-category subtotals", "[memory]") {
  const MemoryPlan p = plan_memory(preset("qwen3.5-4b"), decode_b32());
  const std::string t = p.table();
  CHECK(static_cast<size_t>(std::count(t.begin(), t.end(), '\n')) == 1 + p.entries.size() + kMemoryCategories + 1);
  CHECK(t.find("layers.*.linear_attn.in_proj") != std::string::npos);
  CHECK(t.find("[12352, 2560] bf16") != std::string::npos);
  CHECK(t.find("layers.*.ssm_state") != std::string::npos);
  CHECK(t.find("= kv cache") != std::string::npos);
  CHECK(t.find("= total") != std::string::npos);
  CHECK(t.find(format_bytes(static_cast<double>(p.total))) != std::string::npos);
  for (const char* name :
       {"weights", "conv state", "ssm state", "kv cache", "activations", "step metadata", "workspace"}) {
    CHECK(t.find(name) != std::string::npos);
  }
}

TEST_CASE("check_fits names both sizes and prints the table", "[memory]") {
  const MemoryPlan p = plan_memory(preset("qwen3.5-4b"), decode_b32());
  CHECK_NOTHROW(check_fits(p, p.total));
  CHECK_NOTHROW(check_fits(p, size_t{141} << 30));
  std::string msg;
  try {
    check_fits(p, size_t{8} << 30);
  } catch (const Error& e) {
    msg = e.what();
  }
  const std::string head = "plan needs " + format_bytes(static_cast<double>(p.total)) + " but the device has " +
                           format_bytes(static_cast<double>(size_t{8} << 30)) + " free\n";
  CAPTURE(msg);
  CHECK(msg.rfind(head, 0) == 0);
  CHECK(msg.substr(head.size()) == p.table());
  CHECK_THROWS_AS(check_fits(p, p.total - 1), Error);
}
