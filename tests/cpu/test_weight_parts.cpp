// CPU tests of the weight table (models/weight_parts.h) on the layouts of every preset (measuring
// arena): each checkpoint tensor (expected_weights) is named by exactly one part, holds exactly
// its part's rows x cols values, and the parts tile every step weight they write, each row
// exactly once, halves and interleaved gate_up groups alike; the row map of a group; bad groups.
#include <algorithm>
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

StepTensors layout_of(const Qwen35Config& c) {
  StepLayoutParams p;
  p.num_slots = 2;
  p.max_context = 64;
  p.max_decode_batch = 4;
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
