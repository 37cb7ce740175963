// memory_plan.cpp: the device memory plan of a model (entries per tensor kind, per category) and
// the up-front "does it fit" check.
#include "models/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <utility>

#include "engine/error.h"
#include "engine/tensor.h"
#include "models/step_metadata.h"

namespace sg {
namespace {

constexpr size_t kAlign = 256;  // the arena's alignment (engine/arena.h)
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

class Planner {
 public:
  explicit Planner(MemoryPlan& p) : p_(p) {}
  // `count` tensors of `shape` in `dtype`; skipped when count is 0 (e.g. no attention layers).
  void add(MemoryCategory cat, std::string name, std::initializer_list<int64_t> shape, DType dtype, int64_t count = 1) {
    if (count == 0) return;
    size_t elems = 1;
    std::string dims;
    for (int64_t d : shape) {
      elems *= static_cast<size_t>(d);
      dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    }
    const size_t bytes = static_cast<size_t>(count) * align_up(elems * dtype_size(dtype));
    p_.entries.push_back({std::move(name), fmt::format("[{}] {}", dims, dtype_name(dtype)), count, bytes, cat});
    p_.total += bytes;
  }
  void add_bytes(MemoryCategory cat, std::string name, size_t bytes) {
    const size_t b = align_up(bytes);
    p_.entries.push_back({std::move(name), fmt::format("{} B", bytes), 1, b, cat});
    p_.total += b;
  }

 private:
  MemoryPlan& p_;
};

}  // namespace

std::string_view category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::weights: return "weights";
    case MemoryCategory::conv_state: return "conv state";
    case MemoryCategory::ssm_state: return "ssm state";
    case MemoryCategory::kv_cache: return "kv cache";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::step_metadata: return "step metadata";
    case MemoryCategory::workspace: return "workspace";
  }
  return "?";
}

size_t MemoryPlan::bytes_of(MemoryCategory c) const {
  size_t b = 0;
  for (const MemoryEntry& e : entries) b += e.category == c ? e.bytes : 0;
  return b;
}

std::string MemoryPlan::table() const {
  std::string out = fmt::format("{:<14} {:<46} {:<28} {:>6} {:>10}\n", "category", "name", "shape", "count", "bytes");
  for (const MemoryEntry& e : entries) {
    out += fmt::format("{:<14} {:<46} {:<28} {:>6} {:>10}\n", category_name(e.category), e.name, e.shape, e.count,
                       format_bytes(static_cast<double>(e.bytes)));
  }
  for (int i = 0; i < kMemoryCategories; ++i) {
    const auto c = static_cast<MemoryCategory>(i);
    out += fmt::format("{:<14} {:>93}\n", fmt::format("= {}", category_name(c)),
                       format_bytes(static_cast<double>(bytes_of(c))));
  }
  out += fmt::format("{:<14} {:>93}\n", "= total", format_bytes(static_cast<double>(total)));
  return out;
}

MemoryPlan plan_memory(const Qwen35Config& c, const PlanOptions& o) {
  c.validate(fmt::format("plan_memory: config '{}'", c.name));
  const std::pair<const char*, int> opts[] = {{"num_slots", o.num_slots},
                                              {"max_context", o.max_context},
                                              {"max_decode_batch", o.max_decode_batch},
                                              {"max_prefill_tokens", o.max_prefill_tokens},
                                              {"max_prefill_seqs", o.max_prefill_seqs}};
  for (const auto& [key, v] : opts) {
    if (v < 1) throw Error(fmt::format("plan_memory: {} must be >= 1, got {}", key, v));
  }
  using M = MemoryCategory;
  MemoryPlan plan;
  Planner p(plan);
  const int64_t H = c.hidden, I = c.intermediate, V = c.vocab, Hq = c.Hq, Hkv = c.Hkv, D = c.D;
  const int64_t Hv = c.gdn.Hv, Dk = c.gdn.Dk, Dv = c.gdn.Dv, K = c.gdn.K, C = c.gdn.C();
  const int64_t L = c.layers, nA = c.num_full_attention(), nG = c.num_linear_attention();
  const DType w = o.weight_dtype, act = o.act_dtype, f32 = DType::f32;

  // Weights (docs/MODEL.md "Weights"); per-layer tensors are one entry with count = layers.
  p.add(M::weights, c.tie_word_embeddings ? "model.embed_tokens.weight (= lm_head)" : "model.embed_tokens.weight",
        {V, H}, w);
  if (!c.tie_word_embeddings) p.add(M::weights, "lm_head.weight", {V, H}, w);
  p.add(M::weights, "model.norm.weight", {H}, w);
  p.add(M::weights, "layers.*.input_layernorm.weight", {H}, w, L);
  p.add(M::weights, "layers.*.post_attention_layernorm.weight", {H}, w, L);
  p.add(M::weights, "layers.*.mlp.gate_proj.weight", {I, H}, w, L);
  p.add(M::weights, "layers.*.mlp.up_proj.weight", {I, H}, w, L);
  p.add(M::weights, "layers.*.mlp.down_proj.weight", {H, I}, w, L);
  p.add(M::weights, "layers.*.linear_attn.in_proj_qkv.weight", {C, H}, w, nG);
  p.add(M::weights, "layers.*.linear_attn.in_proj_z.weight", {Hv * Dv, H}, w, nG);
  p.add(M::weights, "layers.*.linear_attn.in_proj_b.weight", {Hv, H}, w, nG);
  p.add(M::weights, "layers.*.linear_attn.in_proj_a.weight", {Hv, H}, w, nG);
  p.add(M::weights, "layers.*.linear_attn.conv1d.weight", {C, K}, f32, nG);  // HF [C, 1, K]
  p.add(M::weights, "layers.*.linear_attn.dt_bias", {Hv}, f32, nG);
  p.add(M::weights, "layers.*.linear_attn.A_log", {Hv}, f32, nG);
  p.add(M::weights, "layers.*.linear_attn.norm.weight", {Dv}, w, nG);
  p.add(M::weights, "layers.*.linear_attn.out_proj.weight", {H, Hv * Dv}, w, nG);
  p.add(M::weights, "layers.*.self_attn.q_proj.weight", {2 * Hq * D, H}, w, nA);
  p.add(M::weights, "layers.*.self_attn.k_proj.weight", {Hkv * D, H}, w, nA);
  p.add(M::weights, "layers.*.self_attn.v_proj.weight", {Hkv * D, H}, w, nA);
  p.add(M::weights, "layers.*.self_attn.o_proj.weight", {H, Hq * D}, w, nA);
  p.add(M::weights, "layers.*.self_attn.q_norm.weight", {D}, w, nA);
  p.add(M::weights, "layers.*.self_attn.k_norm.weight", {D}, w, nA);

  // Per-slot caches (docs/MODEL.md "Caches and slots").
  const int64_t S = o.num_slots, ctx = o.max_context;
  p.add(M::conv_state, "layers.*.conv_state", {S, C, K - 1}, w, nG);
  p.add(M::ssm_state, "layers.*.ssm_state", {S, Hv, Dk, Dv}, f32, nG);
  p.add(M::kv_cache, "layers.*.k_cache", {S, ctx, Hkv, D}, w, nA);
  p.add(M::kv_cache, "layers.*.v_cache", {S, ctx, Hkv, D}, w, nA);

  // Activations of the largest step (see the header for the list).
  const int64_t T = std::max(o.max_decode_batch, o.max_prefill_tokens);
  const int64_t R = std::max(o.max_decode_batch, o.max_prefill_seqs);
  p.add(M::activations, "residual", {T, H}, act);
  p.add(M::activations, "normed", {T, H}, act);
  p.add(M::activations, "mixer/mlp out", {T, H}, act);
  if (nG > 0) {
    p.add(M::activations, "gdn.proj (qkv | z | b | a)", {T, C + Hv * Dv + 2 * Hv}, act);
    p.add(M::activations, "gdn.conv_out", {T, C}, act);
    p.add(M::activations, "gdn.qkv (post-conv)", {T, C}, act);
    p.add(M::activations, "gdn.g", {T, Hv}, f32);
    p.add(M::activations, "gdn.beta", {T, Hv}, f32);
    p.add(M::activations, "gdn.core_out", {T, Hv * Dv}, act);
    p.add(M::activations, "gdn.norm_out", {T, Hv * Dv}, act);
  }
  if (nA > 0) {
    p.add(M::activations, "attn.proj (q+gate | k | v)", {T, 2 * Hq * D + 2 * Hkv * D}, act);
    p.add(M::activations, "attn.out", {T, Hq * D}, act);
    if (c.rotary_dim() > 0) p.add(M::activations, "attn.rope_table", {ctx, c.rotary_dim()}, f32);
  }
  p.add(M::activations, "mlp.gate_up", {T, 2 * I}, act);
  p.add(M::activations, "mlp.act", {T, I}, act);
  p.add(M::activations, "lm_head.in (logit rows)", {R, H}, act);
  p.add(M::activations, "logits", {R, V}, f32);

  // Static step-metadata blocks, one per step kind at its largest key.
  p.add_bytes(M::step_metadata, fmt::format("decode metadata (rows {})", o.max_decode_batch),
              metadata_layout(StepKey::decode(o.max_decode_batch)).total);
  p.add_bytes(M::step_metadata,
              fmt::format("prefill metadata (bucket {}, seqs {})", o.max_prefill_tokens, o.max_prefill_seqs),
              metadata_layout(StepKey::prefill(o.max_prefill_tokens, o.max_prefill_seqs)).total);

  p.add_bytes(M::workspace, "cublas workspace", o.cublas_workspace_bytes);
  return plan;
}

void check_fits(const MemoryPlan& plan, size_t device_free_bytes) {
  if (plan.total <= device_free_bytes) return;
  throw Error(fmt::format("plan needs {} but the device has {} free\n{}", format_bytes(static_cast<double>(plan.total)),
                          format_bytes(static_cast<double>(device_free_bytes)), plan.table()));
}

}  // namespace sg
