// CPU tests of the weight table (models/weight_parts.h) on the layouts of every preset (measuring
// arena): each checkpoint tensor (expected_weights) is named by exactly one part, holds exactly
// its part's rows x cols values, and the parts tile every step weight they write, each row
// exactly once, halves and interleaved gate_up groups alike; each tensor into its own step weight
// (the same-shaped norms and gate vectors included); the row map of a group; bad groups; a
// tensor-parallel rank's share of the LM head is its own tensor, tied or not.
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/arena.h"
#include "engine/error.h"
#include "models/reference_model.h"
#include "models/step_layout.h"
#include "models/weight_parts.h"
#include "tests/support/catch.h"

using namespace sg;

namespace {

StepTensors layout_of(const Qwen35Config& c, int64_t head_rows = 0) {
  StepLayoutParams p;
  p.num_slots = 2;
  p.max_context = 64;
  p.max_decode_batch = 4;
  p.head_rows = head_rows;
  Arena m = Arena::measure();
  return lay_out_step(m, c, p);
}

// The message of the sg::Error weight_parts throws ("" when it does not throw).
std::string parts_error(const Qwen35Config& c, const StepTensors& t, int64_t group) {
  try {
    weight_parts(c, t, group);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

TEST_CASE("weight parts: every checkpoint tensor once, every step weight row exactly once", "[weights]") {
  for (const std::string& name : preset_names()) {
    const Qwen35Config c = preset(name);
    const StepTensors t = layout_of(c);
    for (int64_t group : {0, 8}) {
      CAPTURE(name, group);
      const std::vector<WeightPart> parts = weight_parts(c, t, group);
      const auto expected = expected_weights(c);
      REQUIRE(parts.size() == expected.size());
      std::map<std::string, int64_t> values;  // checkpoint name -> values
      for (const auto& [n, shape] : expected) values[n] = numel(shape);
      std::set<std::string> seen;
      std::map<std::string, std::vector<int>> covered;  // step weight -> times each row is written
      std::map<std::string, int64_t> dst_rows;
      for (const WeightPart& p : parts) {
        CAPTURE(p.name, p.tensor);
        CHECK(seen.insert(p.name).second);  // named once
        REQUIRE(values.count(p.name) == 1);
        CHECK(p.rows * weight_part_cols(p) == values[p.name]);
        const int64_t rows = p.dst.rank >= 1 ? p.dst.dim(0) : 0;
        dst_rows[p.tensor] = rows;
        auto& cov = covered[p.tensor];
        cov.resize(static_cast<size_t>(rows), 0);
        int64_t outside = 0;
        for (int64_t r = 0; r < p.rows; ++r) {
          const int64_t at = weight_part_row(p, r);
          if (at < 0 || at >= rows) {
            ++outside;
          } else {
            ++cov[static_cast<size_t>(at)];
          }
        }
        CHECK(outside == 0);
      }
      for (const auto& [tensor, cov] : covered) {
        CAPTURE(tensor);
        CHECK(std::all_of(cov.begin(), cov.end(), [](int k) { return k == 1; }));
      }
      // Every weight of the layout is written: the fused ones by several parts.
      const std::string l0 = c.is_full_attention(0) ? "layers.0.attn.qkv_proj" : "layers.0.gdn.in_proj";
      CHECK(covered.count(l0) == 1);
      CHECK(covered.count("layers.0.gate_up") == 1);
      CHECK(covered.count("lm_head") == (c.tie_word_embeddings ? 0u : 1u));
      // embed and final_norm (and lm_head when untied); a layer's two norms, gate_up and down, and
      // its mixer's qkv_proj, o_proj, q_norm, k_norm or in_proj, conv_w, dt_bias, A_log, norm_w, out_proj.
      size_t step_weights = 2 + (c.tie_word_embeddings ? 0 : 1);
      for (int i = 0; i < c.layers; ++i) step_weights += 4 + (c.is_full_attention(i) ? 4 : 6);
      CHECK(covered.size() == step_weights);
    }
  }
}

TEST_CASE("weight parts: gate_up halves and groups of 8", "[weights]") {
  const Qwen35Config c = preset("qwen3.5-4b");
  const StepTensors t = layout_of(c);
  const int64_t I = c.intermediate;
  auto find = [](const std::vector<WeightPart>& parts, const std::string& name) {
    const auto it = std::find_if(parts.begin(), parts.end(), [&](const WeightPart& p) { return p.name == name; });
    REQUIRE(it != parts.end());
    return *it;
  };
  const auto halves = weight_parts(c, t, 0);
  const WeightPart up0 = find(halves, "model.layers.0.mlp.up_proj.weight");
  CHECK(up0.tensor == "layers.0.gate_up");
  CHECK(weight_part_row(up0, 0) == I);
  CHECK(weight_part_row(up0, I - 1) == 2 * I - 1);
  const auto grouped = weight_parts(c, t, 8);
  const WeightPart gate = find(grouped, "model.layers.0.mlp.gate_proj.weight");
  const WeightPart up = find(grouped, "model.layers.0.mlp.up_proj.weight");
  // gate rows 8 j .. 8 j + 7 at 16 j .., up rows at 16 j + 8 ..
  CHECK(weight_part_row(gate, 0) == 0);
  CHECK(weight_part_row(gate, 7) == 7);
  CHECK(weight_part_row(gate, 8) == 16);
  CHECK(weight_part_row(up, 0) == 8);
  CHECK(weight_part_row(up, 9) == 25);
  CHECK(weight_part_row(up, I - 1) == 2 * I - 1);
  const WeightPart z = find(grouped, "model.layers.0.linear_attn.in_proj_z.weight");
  CHECK(z.tensor == "layers.0.gdn.in_proj");
  CHECK(z.row0 == c.gdn.C());
  CHECK(weight_part_cols(z) == c.hidden);
  const WeightPart conv = find(grouped, "model.layers.0.linear_attn.conv1d.weight");
  CHECK(weight_part_cols(conv) == c.gdn.K);  // [C, 1, K] into [C, K]
  // (the messages end in the source location)
  CHECK(
      parts_error(c, t, 7).starts_with("weight_parts: gate_up groups of 7 rows do not divide intermediate_size 9216"));
  StepTensors short_t = t;
  short_t.layers.pop_back();
  CHECK(parts_error(c, short_t, 8).starts_with("weight_parts: 31 layers laid out, the config has 32"));
}

TEST_CASE("weight parts: each checkpoint tensor goes to its own step weight, same-shaped pairs included", "[weights]") {
  const Qwen35Config c = preset("qwen3.5-4b");
  StepTensors t = layout_of(c);
  // Distinct fake addresses for every weight view (a measuring arena leaves them null).
  uintptr_t next = 0x1000;
  auto tag = [&](TensorView& v) { v.data = reinterpret_cast<void*>(next += 0x1000); };
  tag(t.embed);
  tag(t.final_norm);
  for (StepLayer& L : t.layers) {
    for (TensorView* v : {&L.in_norm, &L.post_norm, &L.gate_up, &L.down, &L.attn.qkv_proj, &L.attn.q_norm,
                          &L.attn.k_norm, &L.attn.o_proj, &L.gdn.in_proj, &L.gdn.conv_w, &L.gdn.A_log, &L.gdn.dt_bias,
                          &L.gdn.norm_w, &L.gdn.out_proj}) {
      tag(*v);
    }
  }
  const auto parts = weight_parts(c, t, 8);
  auto dst_of = [&](const std::string& name) -> const void* {
    for (const WeightPart& p : parts)
      if (p.name == name) return p.dst.data;
    return nullptr;
  };
  int attn = -1;
  for (int i = 0; i < c.layers && attn < 0; ++i) attn = c.is_full_attention(i) ? i : -1;
  REQUIRE(attn >= 0);
  REQUIRE_FALSE(c.is_full_attention(0));
  const StepLayer &G = t.layers[0], &A = t.layers[static_cast<size_t>(attn)];
  const std::string g = "model.layers.0.", a = "model.layers." + std::to_string(attn) + ".";
  CHECK(dst_of("model.embed_tokens.weight") == t.embed.data);
  CHECK(dst_of("model.norm.weight") == t.final_norm.data);
  CHECK(dst_of(g + "input_layernorm.weight") == G.in_norm.data);
  CHECK(dst_of(g + "post_attention_layernorm.weight") == G.post_norm.data);
  CHECK(dst_of(g + "linear_attn.A_log") == G.gdn.A_log.data);
  CHECK(dst_of(g + "linear_attn.dt_bias") == G.gdn.dt_bias.data);
  CHECK(dst_of(g + "linear_attn.norm.weight") == G.gdn.norm_w.data);
  CHECK(dst_of(g + "linear_attn.conv1d.weight") == G.gdn.conv_w.data);
  CHECK(dst_of(g + "linear_attn.in_proj_b.weight") == G.gdn.in_proj.data);
  CHECK(dst_of(g + "linear_attn.out_proj.weight") == G.gdn.out_proj.data);
  CHECK(dst_of(g + "mlp.up_proj.weight") == G.gate_up.data);
  CHECK(dst_of(g + "mlp.down_proj.weight") == G.down.data);
  CHECK(dst_of(a + "input_layernorm.weight") == A.in_norm.data);
  CHECK(dst_of(a + "post_attention_layernorm.weight") == A.post_norm.data);
  CHECK(dst_of(a + "self_attn.q_norm.weight") == A.attn.q_norm.data);
  CHECK(dst_of(a + "self_attn.k_norm.weight") == A.attn.k_norm.data);
  CHECK(dst_of(a + "self_attn.v_proj.weight") == A.attn.qkv_proj.data);
  CHECK(dst_of(a + "self_attn.o_proj.weight") == A.attn.o_proj.data);
}

TEST_CASE("weight parts: a rank's share of the LM head is its own part, also where the model ties it",
          "[weights][tp]") {
  for (const std::string& name : {std::string("tiny"), std::string("tiny-dkdv")}) {  // untied, tied
    const Qwen35Config c = preset(name);
    CAPTURE(name);
    const StepTensors t = layout_of(c, 100);
    const std::vector<WeightPart> parts = weight_parts(c, t, 0);
    const auto expected = expected_weights(c, 100);  // lm_head.weight [100, H] in both
    REQUIRE(parts.size() == expected.size());
    const auto head =
        std::find_if(parts.begin(), parts.end(), [](const WeightPart& p) { return p.name == "lm_head.weight"; });
    REQUIRE(head != parts.end());
    CHECK(head->tensor == "lm_head");
    CHECK(head->rows == 100);
    CHECK(head->dst.dim(0) == 100);
    CHECK(weight_part_cols(*head) == c.hidden);
    // Without a share a tied model has no lm_head part (the head is the embedding).
    const std::vector<WeightPart> whole = weight_parts(c, layout_of(c), 0);
    CHECK(std::count_if(whole.begin(), whole.end(), [](const WeightPart& p) { return p.name == "lm_head.weight"; }) ==
          (c.tie_word_embeddings ? 0 : 1));
  }
}
