// weight_parts.cpp: the checkpoint tensors' places in the step's fused weights (weight_parts.h).
#include "models/weight_parts.h"

#include <fmt/format.h>

#include "engine/error.h"

namespace sg {

int64_t weight_part_cols(const WeightPart& p) { return p.dst.rank >= 2 ? p.dst.numel() / p.dst.dim(0) : 1; }

int64_t weight_part_row(const WeightPart& p, int64_t r) {
  if (p.group == 0) return p.row0 + r;
  return p.row0 + (r / p.group) * 2 * p.group + r % p.group;
}

std::vector<WeightPart> weight_parts(const Qwen35Config& c, const StepTensors& t, int64_t gu_group) {
  require(gu_group >= 0 && (gu_group == 0 || c.intermediate % gu_group == 0),
          "weight_parts: gate_up groups of {} rows do not divide intermediate_size {}", gu_group, c.intermediate);
  require(t.layers.size() == static_cast<size_t>(c.layers), "weight_parts: {} layers laid out, the config has {}",
          t.layers.size(), c.layers);
  std::vector<WeightPart> parts;
  auto add = [&](std::string name, std::string tensor, const TensorView& dst, int64_t row0, int64_t rows,
                 int64_t group = 0) {
    parts.push_back({std::move(name), std::move(tensor), dst, row0, rows, group});
  };
  // A whole tensor: all of dst's rows (1-D: elements).
  auto whole = [&](std::string name, std::string tensor, const TensorView& dst) {
    add(std::move(name), std::move(tensor), dst, 0, dst.rank >= 1 ? dst.dim(0) : 0);
  };
  const GdnDims& g = c.gdn;
  const int64_t C = g.C(), HvDv = int64_t{g.Hv} * g.Dv, Hv = g.Hv, I = c.intermediate;
  const int64_t qrows = 2 * int64_t{c.Hq} * c.D, kvrows = int64_t{c.Hkv} * c.D;
  whole("model.embed_tokens.weight", "embed", t.embed);
  for (int i = 0; i < c.layers; ++i) {
    const StepLayer& L = t.layers[static_cast<size_t>(i)];
    const std::string p = fmt::format("model.layers.{}.", i), l = fmt::format("layers.{}.", i);
    whole(p + "input_layernorm.weight", l + "in_norm", L.in_norm);
    whole(p + "post_attention_layernorm.weight", l + "post_norm", L.post_norm);
    if (L.attention) {
      const std::string qkv = l + "attn.qkv_proj";
      add(p + "self_attn.q_proj.weight", qkv, L.attn.qkv_proj, 0, qrows);
      add(p + "self_attn.k_proj.weight", qkv, L.attn.qkv_proj, qrows, kvrows);
      add(p + "self_attn.v_proj.weight", qkv, L.attn.qkv_proj, qrows + kvrows, kvrows);
      whole(p + "self_attn.o_proj.weight", l + "attn.o_proj", L.attn.o_proj);
      whole(p + "self_attn.q_norm.weight", l + "attn.q_norm", L.attn.q_norm);
      whole(p + "self_attn.k_norm.weight", l + "attn.k_norm", L.attn.k_norm);
    } else {
      const std::string in = l + "gdn.in_proj";
      add(p + "linear_attn.in_proj_qkv.weight", in, L.gdn.in_proj, 0, C);
      add(p + "linear_attn.in_proj_z.weight", in, L.gdn.in_proj, C, HvDv);
      add(p + "linear_attn.in_proj_b.weight", in, L.gdn.in_proj, C + HvDv, Hv);
      add(p + "linear_attn.in_proj_a.weight", in, L.gdn.in_proj, C + HvDv + Hv, Hv);
      whole(p + "linear_attn.conv1d.weight", l + "gdn.conv_w", L.gdn.conv_w);  // [C, 1, K] == [C, K]
      whole(p + "linear_attn.dt_bias", l + "gdn.dt_bias", L.gdn.dt_bias);
      whole(p + "linear_attn.A_log", l + "gdn.A_log", L.gdn.A_log);
      whole(p + "linear_attn.norm.weight", l + "gdn.norm_w", L.gdn.norm_w);
      whole(p + "linear_attn.out_proj.weight", l + "gdn.out_proj", L.gdn.out_proj);
    }
    // gate_proj and up_proj: halves, or groups of gu_group rows alternating (gate rows 8 j .. at
    // 16 j .., up rows 8 j .. at 16 j + 8 ..).
    const std::string gu = l + "gate_up";
    add(p + "mlp.gate_proj.weight", gu, L.gate_up, 0, I, gu_group);
    add(p + "mlp.up_proj.weight", gu, L.gate_up, gu_group == 0 ? I : gu_group, I, gu_group);
    whole(p + "mlp.down_proj.weight", l + "down", L.down);
  }
  whole("model.norm.weight", "final_norm", t.final_norm);
  // Its own tensor unless tied, and a tensor-parallel rank's share even when tied (tp_plan.h).
  if (!c.tie_word_embeddings || t.lm_head.dim(0) != c.vocab) whole("lm_head.weight", "lm_head", t.lm_head);
  return parts;
}

}  // namespace sg
