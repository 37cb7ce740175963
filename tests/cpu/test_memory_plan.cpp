// CPU tests of the device memory plan (models/memory_plan.h): totals for the 4B, 27B and tiny
// presets against numbers computed here by hand from docs/MODEL.md and docs/BENCHMARKS.md, category
// sums, the table and check_fits' error.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "engine/error.h"
#include "engine/tensor.h"
#include "models/memory_plan.h"
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

bool has_entry(const MemoryPlan& p, const std::string& name) {
  return std::any_of(p.entries.begin(), p.entries.end(), [&](const MemoryEntry& e) { return e.name == name; });
}

PlanOptions decode_b32() {
  PlanOptions o;
  o.num_slots = 32;
  o.max_context = 1024;
  o.max_decode_batch = 32;
  o.max_prefill_tokens = 32768;
  o.max_prefill_seqs = 32;
  return o;
}

}  // namespace

TEST_CASE("4B plan: 8.41 GB of weights, 1.61 GB of SSM state, 1.07 GB of KV at 32 x 1024", "[memory]") {
  const Qwen35Config c = preset("qwen3.5-4b");
  const MemoryPlan p = plan_memory(c, decode_b32());
  // Parameters, docs/MODEL.md shapes: H 2560, I 9216, V 248320, C 8192, Hv*Dv 4096, Hq*D 4096.
  const uint64_t embed = 248320ull * 2560;
  const uint64_t gdn =
      8192ull * 2560 + 4096ull * 2560 + 2ull * 32 * 2560 + 8192ull * 4 + 32 + 32 + 128 + 2560ull * 4096;
  const uint64_t attn = 8192ull * 2560 + 2ull * 1024 * 2560 + 2560ull * 4096 + 2ull * 256;
  const uint64_t mlp_norms = 3ull * 9216 * 2560 + 2ull * 2560;
  const uint64_t params = embed + 24 * (gdn + mlp_norms) + 8 * (attn + mlp_norms) + 2560;
  CHECK(params * 2 ==
        8411502592ull);  // docs/BENCHMARKS.md: "the 4B decode-b32 step reads 8.41 GB of weights" (tied lm_head once)
  // The plan keeps conv1d, dt_bias and A_log in f32 (what the kernels read), each small tensor
  // padded to 256 bytes: +8192*4*2 and 2 x (256 - 64) bytes per GDN layer.
  const uint64_t weights = params * 2 + 24 * (8192ull * 4 * 2 + 2 * (256 - 64));
  CHECK(p.bytes_of(MemoryCategory::weights) == weights);
  CHECK(within(static_cast<double>(p.bytes_of(MemoryCategory::weights)), 8.41e9, 0.01));
  CHECK(has_entry(p, "model.embed_tokens.weight (= lm_head)"));
  CHECK_FALSE(has_entry(p, "lm_head.weight"));

  // SSM state: 24 layers x 32 slots x [32, 128, 128] f32; the step reads and writes it: 3.22 GB.
  const uint64_t ssm = 24ull * 32 * 32 * 128 * 128 * 4;
  CHECK(p.bytes_of(MemoryCategory::ssm_state) == ssm);
  CHECK(within(2.0 * static_cast<double>(ssm), 3.22e9, 0.01));
  // KV: 8 layers x 32 slots x 1024 x [4, 256] x (K, V) x bf16 = 1.07 GB.
  const uint64_t kv = 8ull * 32 * 1024 * 4 * 256 * 2 * 2;
  CHECK(kv == 1073741824ull);
  CHECK(p.bytes_of(MemoryCategory::kv_cache) == kv);
  // Conv state: 24 layers x [32, 8192, 3] bf16.
  CHECK(p.bytes_of(MemoryCategory::conv_state) == 24ull * 32 * 8192 * 3 * 2);

  // Activations for T = 32768 tokens, R = 32 logit rows (every term is a multiple of 256 here).
  const uint64_t T = 32768, R = 32, H = 2560, C = 8192, HvDv = 4096, Hv = 32, I = 9216, V = 248320;
  const uint64_t acts = 3 * T * H * 2 + T * (C + HvDv + 2 * Hv) * 2 + 2 * T * C * 2 + 2 * T * Hv * 4 +
                        2 * T * HvDv * 2 + T * (2 * 16 * 256 + 2 * 4 * 256) * 2 + T * 16 * 256 * 2 + T * 2 * I * 2 +
                        T * I * 2 + R * H * 2 + R * V * 4 + 1024 * 64 * 4;  // the last: the rotary table
  CHECK(p.bytes_of(MemoryCategory::activations) == acts);

  // Metadata: decode rows 32: nine 256-byte sections + 32 chunks x 12 B = 384 -> 512.
  CHECK(metadata_layout(StepKey::decode(32)).total == 9 * 256 + 512);
  CHECK(p.bytes_of(MemoryCategory::step_metadata) == 2816 + metadata_layout(StepKey::prefill(32768, 32)).total);
  CHECK(p.bytes_of(MemoryCategory::workspace) == size_t{32} << 20);

  CHECK(sum_categories(p) == p.total);
  size_t by_entry = 0;
  for (const MemoryEntry& e : p.entries) by_entry += e.bytes;
  CHECK(by_entry == p.total);
}

TEST_CASE("27B plan: 51.2 GB of weights read per step, 4.83 GB of SSM state, 2.15 GB of KV", "[memory]") {
  const Qwen35Config c = preset("qwen3.5-27b");
  const MemoryPlan p = plan_memory(c, decode_b32());
  // H 5120, I 17408, C 10240, Hv*Dv 6144, Hq*D 6144, untied lm_head.
  const uint64_t embed = 248320ull * 5120;
  const uint64_t gdn =
      10240ull * 5120 + 6144ull * 5120 + 2ull * 48 * 5120 + 10240ull * 4 + 48 + 48 + 128 + 5120ull * 6144;
  const uint64_t attn = 2ull * 6144 * 5120 + 2ull * 1024 * 5120 + 5120ull * 6144 + 2ull * 256;
  const uint64_t mlp_norms = 3ull * 17408 * 5120 + 2ull * 5120;
  const uint64_t params = 2 * embed + 48 * (gdn + mlp_norms) + 16 * (attn + mlp_norms) + 5120;
  const uint64_t weights = params * 2 + 48 * (10240ull * 4 * 2 + 2 * (256 - 96));
  CHECK(p.bytes_of(MemoryCategory::weights) == weights);
  // the 27B step reads 51.2 GB of weights: everything but the input embedding,
  // of which a step gathers only its tokens' rows.
  CHECK(within(static_cast<double>(weights - embed * 2), 51.2e9, 0.01));
  CHECK(has_entry(p, "lm_head.weight"));
  CHECK(has_entry(p, "model.embed_tokens.weight"));

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
  PlanOptions o;
  o.num_slots = 4;
  o.max_context = 128;
  o.max_decode_batch = 4;
  o.max_prefill_tokens = 64;
  o.max_prefill_seqs = 4;
  o.cublas_workspace_bytes = 1000;  // rounds up to 1024
  const MemoryPlan p = plan_memory(c, o);
  // GDN: Hk 2, Hv 4, Dk = Dv = 32, K 4, C = 256.
  const uint64_t gdn = a256(256 * 64 * 2) + a256(128 * 64 * 2) + 2 * a256(4 * 64 * 2) + a256(256 * 4 * 4) +
                       2 * a256(4 * 4) + a256(32 * 2) + a256(64 * 128 * 2);
  const uint64_t attn = a256(256 * 64 * 2) + 2 * a256(64 * 64 * 2) + a256(64 * 128 * 2) + 2 * a256(32 * 2);
  const uint64_t per_layer = 2 * a256(64 * 2) + 3 * a256(128 * 64 * 2);
  const uint64_t weights = 2 * a256(256 * 64 * 2) + a256(64 * 2) + 6 * per_layer + 4 * gdn + 2 * attn;
  CHECK(weights == 781568);
  CHECK(p.bytes_of(MemoryCategory::weights) == weights);
  CHECK(p.bytes_of(MemoryCategory::conv_state) == 4 * a256(4 * 256 * 3 * 2));
  CHECK(p.bytes_of(MemoryCategory::ssm_state) == 4 * a256(4 * 4 * 32 * 32 * 4));
  CHECK(p.bytes_of(MemoryCategory::kv_cache) == 2 * 2 * a256(4 * 128 * 2 * 32 * 2));
  CHECK(p.bytes_of(MemoryCategory::workspace) == 1024);
  CHECK(p.bytes_of(MemoryCategory::step_metadata) ==
        metadata_layout(StepKey::decode(4)).total + metadata_layout(StepKey::prefill(64, 4)).total);
  CHECK(sum_categories(p) == p.total);

  SECTION("a tied preset counts the embedding once") {
    const MemoryPlan t = plan_memory(preset("tiny-dkdv"), o);
    CHECK(has_entry(t, "model.embed_tokens.weight (= lm_head)"));
    CHECK_FALSE(has_entry(t, "lm_head.weight"));
  }
  SECTION("larger options never shrink any category") {
    PlanOptions big = o;
    big.num_slots = 8;
    big.max_context = 256;
    big.max_prefill_tokens = 128;
    const MemoryPlan q = plan_memory(c, big);
    for (int i = 0; i < kMemoryCategories; ++i) {
      const auto cat = static_cast<MemoryCategory>(i);
      CAPTURE(category_name(cat));
      CHECK(q.bytes_of(cat) >= p.bytes_of(cat));
    }
    CHECK(q.bytes_of(MemoryCategory::kv_cache) == 4 * p.bytes_of(MemoryCategory::kv_cache));
  }
}

TEST_CASE("the plan table lists every entry and the per-category subtotals", "[memory]") {
  const MemoryPlan p = plan_memory(preset("qwen3.5-4b"), decode_b32());
  const std::string t = p.table();
  CHECK(static_cast<size_t>(std::count(t.begin(), t.end(), '\n')) == 1 + p.entries.size() + kMemoryCategories + 1);
  CHECK(t.find("layers.*.linear_attn.in_proj_qkv.weight") != std::string::npos);
  CHECK(t.find("[8192, 2560] bf16") != std::string::npos);
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

TEST_CASE("plan_memory rejects options below 1", "[memory]") {
  PlanOptions o = decode_b32();
  o.num_slots = 0;
  try {
    plan_memory(preset("tiny"), o);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "plan_memory: num_slots must be >= 1, got 0");
  }
  o = decode_b32();
  o.max_prefill_seqs = -1;
  CHECK_THROWS_AS(plan_memory(preset("tiny"), o), Error);
}
