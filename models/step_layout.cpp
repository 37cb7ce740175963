// step_layout.cpp: see step_layout.h.
#include "models/step_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "kernels/argmax.h"  // ArgmaxPair (a plain struct)
#include "models/step_metadata.h"

namespace sg {

int step_act_rows(int max_decode_batch, int max_prefill_tokens) {
  return std::max(max_decode_batch, max_prefill_tokens);
}

int step_logit_rows(int max_decode_batch, int max_prefill_tokens, int max_prefill_seqs) {
  return std::max(max_decode_batch, max_prefill_tokens > 0 ? max_prefill_seqs : 0);
}

int step_proj_width(const Qwen35Config& c) {
  const GdnDims& g = c.gdn;
  int w = 2 * c.intermediate;
  if (c.num_linear_attention() > 0) w = std::max(w, g.C() + g.Hv * g.Dv + 2 * g.Hv);
  if (c.num_full_attention() > 0) w = std::max(w, 2 * c.Hq * c.D + 2 * c.Hkv * c.D);
  return w;
}

size_t step_meta_bytes(int max_decode_batch, int max_prefill_tokens, int max_prefill_seqs) {
  size_t b = metadata_layout(StepKey::decode(max_decode_batch)).total;
  if (max_prefill_tokens > 0) {
    b = std::max(b, metadata_layout(StepKey::prefill(max_prefill_tokens, max_prefill_seqs)).total);
  }
  return b;
}

StepTensors lay_out_step(Arena& a, const Qwen35Config& c, const StepLayoutParams& p) {
  const GdnDims& g = c.gdn;
  const DType wd = p.act, act = p.act;
  const int64_t H = c.hidden, I = c.intermediate, V = c.vocab;
  const int64_t C = g.C(), K = g.K, Hk = g.Hk, Hv = g.Hv, Dk = g.Dk, Dv = g.Dv;
  const int64_t Hq = c.Hq, Hkv = c.Hkv, D = c.D;
  const int64_t S = p.num_slots, Lc = p.max_context, R = step_act_rows(p.max_decode_batch, p.max_prefill_tokens),
                L = step_logit_rows(p.max_decode_batch, p.max_prefill_tokens, p.max_prefill_seqs);
  StepTensors t;

  a.section("weights");
  t.embed = a.take("embed_tokens", wd, {V, H});
  const int64_t Vh = p.head_rows > 0 ? p.head_rows : V;  // LM head rows, logits width
  // Its own tensor unless tied, and a rank's share (head_rows of fewer rows) even when tied; the
  // same rule as weight_parts'.
  const bool own_head = !c.tie_word_embeddings || Vh != V;
  t.lm_head = own_head ? a.take("lm_head", wd, {Vh, H}) : t.embed;
  t.final_norm = a.take("norm", wd, {H});
  t.layers.assign(static_cast<size_t>(c.layers), StepLayer{});
  for (int i = 0; i < c.layers; ++i) {
    StepLayer& l = t.layers[static_cast<size_t>(i)];
    const std::string n = fmt::format("layers.{}.", i);
    l.attention = c.is_full_attention(i);
    l.in_norm = a.take(n + "input_layernorm", wd, {H});
    l.post_norm = a.take(n + "post_attention_layernorm", wd, {H});
    l.gate_up = a.take(n + "mlp.gate_up", wd, {2 * I, H});
    l.down = a.take(n + "mlp.down", wd, {H, I});
    if (l.attention) {
      l.attn.qkv_proj = a.take(n + "self_attn.qkv_proj", wd, {2 * Hq * D + 2 * Hkv * D, H});
      l.attn.q_norm = a.take(n + "self_attn.q_norm", wd, {D});
      l.attn.k_norm = a.take(n + "self_attn.k_norm", wd, {D});
      l.attn.o_proj = a.take(n + "self_attn.o_proj", wd, {H, Hq * D});
    } else {
      l.gdn.in_proj = a.take(n + "linear_attn.in_proj", wd, {C + Hv * Dv + 2 * Hv, H});
      l.gdn.conv_w = a.take(n + "linear_attn.conv1d", DType::f32, {C, K});
      l.gdn.A_log = a.take(n + "linear_attn.A_log", DType::f32, {Hv});
      l.gdn.dt_bias = a.take(n + "linear_attn.dt_bias", DType::f32, {Hv});
      l.gdn.norm_w = a.take(n + "linear_attn.norm", wd, {Dv});
      l.gdn.out_proj = a.take(n + "linear_attn.out_proj", wd, {H, Hv * Dv});
    }
  }
  for (int i = 0; i < c.layers; ++i) {  // the per-slot caches
    StepLayer& l = t.layers[static_cast<size_t>(i)];
    const std::string n = fmt::format("layers.{}.", i);
    if (l.attention) {
      a.section("kv cache");
      l.attn.k_cache = a.take(n + "k_cache", act, {S, Lc, Hkv, D});
      l.attn.v_cache = a.take(n + "v_cache", act, {S, Lc, Hkv, D});
    } else {
      a.section("conv state");
      l.gdn.conv_state = a.take(n + "conv_state", act, {S, C, K - 1});
      a.section("ssm state");
      l.gdn.ssm_state = a.take(n + "ssm_state", p.ssm_state, {S, Hv, Dk, Dv});
    }
  }
  StepActs& x = t.a;  // activations (R rows) and outputs (L rows)
  a.section("activations");
  x.x = a.take("x", act, {R, H});
  x.h = a.take("h", act, {R, H});
  x.mix = a.take("mix", act, {R, H});
  if (p.mix_f32_rows > 0) x.mix32 = a.take("mix_f32", DType::f32, {p.mix_f32_rows, H});
  x.proj = a.take("proj", act, {R * step_proj_width(c)});
  x.mlp = a.take("mlp", act, {R, I});
  if (c.num_linear_attention() > 0) {
    x.conv_out = a.take("conv_out", act, {R, C});
    x.q = a.take("gdn.q", act, {R, Hk, Dk});
    x.k = a.take("gdn.k", act, {R, Hk, Dk});
    x.v = a.take("gdn.v", act, {R, Hv, Dv});
    x.g = a.take("gdn.g", DType::f32, {R, Hv});
    x.beta = a.take("gdn.beta", DType::f32, {R, Hv});
    x.core = a.take("gdn.core", act, {R, Hv, Dv});
    if (p.delta_workspace_bytes > 0) {
      a.section("workspace");
      x.delta_ws = a.take("gdn.delta_workspace", DType::i8, {static_cast<int64_t>(p.delta_workspace_bytes)});
      a.section("activations");
    }
  }
  if (c.num_full_attention() > 0) {
    x.aq = a.take("attn.q", act, {R, Hq, D});
    x.agate = a.take("attn.gate", act, {R, Hq, D});
    x.aout = a.take("attn.out", act, {R, Hq, D});
    a.section("workspace");
    const auto ws = static_cast<int64_t>((p.attn_workspace_bytes + 3) / 4);
    x.attn_ws = a.take("attn.workspace", DType::f32, {std::max<int64_t>(1, ws)});
    a.section("activations");
    if (c.rotary_dim() > 0) x.rope = a.take("attn.rope_table", DType::f32, {Lc, c.rotary_dim()});
  }
  x.logits = a.take("logits", DType::f32, {L, Vh});
  x.tokens = a.take("tokens", DType::i32, {L});
  a.section("workspace");
  x.argmax_ws =
      a.take("argmax.workspace", DType::i8, {std::max<int64_t>(16, static_cast<int64_t>(p.argmax_workspace_bytes))});
  x.argmax_counters = a.take("argmax.counters", DType::i32, {L});
  if (p.tp_ranks > 0) {
    const auto pair = static_cast<int64_t>(sizeof(ArgmaxPair));
    x.tp_pairs = a.take("tp.pairs", DType::i8, {L * pair});
    x.tp_gathered = a.take("tp.gathered_pairs", DType::i8, {int64_t{p.tp_ranks} * L * pair});
  }
  // The skinny GEMM's split-K partials and counters: the most any projection weight needs.
  size_t gws = 0;
  int64_t most_n = 1;
  auto projection = [&](const TensorView& W) {
    if (W.rank != 2) return;  // (the other mixer's views are empty)
    most_n = std::max<int64_t>(most_n, W.dim(0));
    if (p.gemm_workspace_bytes) {
      gws = std::max(gws, p.gemm_workspace_bytes(static_cast<int>(W.dim(0)), static_cast<int>(W.dim(1))));
    }
  };
  projection(t.lm_head);
  for (const StepLayer& l : t.layers) {
    for (const TensorView* W :
         {&l.gate_up, &l.down, &l.gdn.in_proj, &l.gdn.out_proj, &l.attn.qkv_proj, &l.attn.o_proj}) {
      projection(*W);
    }
  }
  x.gemm_ws = a.take("gemm.workspace", DType::f32, {std::max<int64_t>(4, static_cast<int64_t>((gws + 3) / 4))});
  x.gemm_counters = a.take("gemm.counters", DType::i32, {(most_n + 63) / 64});
  a.section("step metadata");
  x.meta = a.take("step metadata", DType::i8, {static_cast<int64_t>(p.meta_bytes)});
  return t;
}

}  // namespace sg
