// tp_plan.cpp: the tensor-parallel split of a Qwen3.5 model (tp_plan.h).
#include "models/tp_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "engine/text.h"

namespace sg {
namespace {

// [n r / R, n (r + 1) / R) for n divisible by R.
TpRange even_part(int64_t n, int r, int R) { return {n / R * r, n / R * (r + 1)}; }

// "model.layers.{i}.{suffix}" -> (i, suffix); other names -> (-1, name).
std::pair<int, std::string> split_layer_name(const std::string& name) {
  static const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return {-1, name};
  const size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return {-1, name};
  const std::string idx = name.substr(prefix.size(), dot - prefix.size());
  if (idx.empty() || idx.size() > 6 || (idx.size() > 1 && idx[0] == '0') ||
      !std::all_of(idx.begin(), idx.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
    return {-1, name};  // (as the model names them: no sign, no leading zero)
  return {std::stoi(idx), name.substr(dot + 1)};
}

TpRange scaled(const TpRange& r, int64_t by, int64_t offset = 0) {
  return {offset + r.begin * by, offset + r.end * by};
}

bool same_dims(const Qwen35Config& a, const Qwen35Config& b) {
  return a.hidden == b.hidden && a.layers == b.layers && a.intermediate == b.intermediate && a.vocab == b.vocab &&
         a.Hq == b.Hq && a.Hkv == b.Hkv && a.D == b.D && a.gdn.Hk == b.gdn.Hk && a.gdn.Hv == b.gdn.Hv &&
         a.gdn.Dk == b.gdn.Dk && a.gdn.Dv == b.gdn.Dv && a.gdn.K == b.gdn.K && a.layer_types == b.layer_types &&
         a.tie_word_embeddings == b.tie_word_embeddings;
}

// Rank r of a plan that tp_plan made for c's dimensions.
const TpRank& plan_rank(const Qwen35Config& c, const TpPlan& plan, int r) {
  if (plan.rank.empty() || !same_dims(c, plan.model))
    throw Error(fmt::format("tensor parallel: the plan was not made by tp_plan for '{}'", printable(c.name)));
  if (r < 0 || r >= plan.ranks()) throw Error(fmt::format("tensor parallel: rank {} outside [0, {})", r, plan.ranks()));
  return plan.rank[static_cast<size_t>(r)];
}

}  // namespace

TpPlan tp_plan(const Qwen35Config& c, int ranks) {
  c.validate(fmt::format("tensor parallel plan for '{}'", printable(c.name)));
  if (ranks < 1) throw Error(fmt::format("tensor parallel: the rank count must be at least 1, got {}", ranks));
  std::vector<std::string> bad;
  auto divides = [&](int64_t n, const char* what) {
    if (n % ranks != 0) bad.push_back(fmt::format("{} {}", what, n));
  };
  if (c.num_linear_attention() > 0) divides(c.gdn.Hk, "GDN key heads");
  if (c.num_full_attention() > 0) {
    divides(c.Hq, "attention query heads");
    divides(c.Hkv, "KV heads");
  }
  divides(c.intermediate, "intermediate size");
  if (!bad.empty())
    throw Error(fmt::format("tensor parallel over {} ranks needs the rank count to divide the {} of '{}' ({})", ranks,
                            bad.size() == 1 ? "size" : "sizes", printable(c.name), fmt::join(bad, ", ")));
  TpPlan p;
  p.model = c;
  const bool gdn = c.num_linear_attention() > 0, attn = c.num_full_attention() > 0;
  const int64_t vper = (static_cast<int64_t>(c.vocab) + ranks - 1) / ranks;
  if (vper * (ranks - 1) >= c.vocab)
    throw Error(fmt::format("tensor parallel: {} ranks of {} vocabulary rows each leave the last rank none ({} rows)",
                            ranks, vper, c.vocab));
  for (int r = 0; r < ranks; ++r) {
    TpRank k;
    k.rank = r;
    if (gdn) {
      k.k_heads = even_part(c.gdn.Hk, r, ranks);
      k.v_heads = even_part(c.gdn.Hv, r, ranks);  // Hv = Hk (Hv / Hk): the value heads of its key heads
    }
    if (attn) {
      k.q_heads = even_part(c.Hq, r, ranks);
      k.kv_heads = even_part(c.Hkv, r, ranks);
    }
    k.intermediate = even_part(c.intermediate, r, ranks);
    k.vocab = {std::min<int64_t>(c.vocab, vper * r), std::min<int64_t>(c.vocab, vper * (r + 1))};
    k.config = c;
    k.config.name = fmt::format("{} (rank {} of {})", c.name, r, ranks);
    if (gdn) {
      k.config.gdn.Hk = c.gdn.Hk / ranks;
      k.config.gdn.Hv = c.gdn.Hv / ranks;
    }
    if (attn) {
      k.config.Hq = c.Hq / ranks;
      k.config.Hkv = c.Hkv / ranks;
    }
    k.config.intermediate = c.intermediate / ranks;
    k.config.tie_word_embeddings = false;  // the rank's head is its own rows (tp_expected_weights)
    k.config.validate(fmt::format("tensor parallel rank {} of '{}'", r, printable(c.name)));
    p.rank.push_back(k);
  }
  return p;
}

TpSlice tp_slice(const Qwen35Config& c, const TpPlan& plan, int r, const std::string& name) {
  const TpRank& k = plan_rank(c, plan, r);
  const GdnDims& g = c.gdn;
  const auto [layer, s] = split_layer_name(name);
  const auto unknown = [&] {
    return Error(fmt::format("tensor parallel: '{}' is not a tensor of '{}'", printable(name), printable(c.name)));
  };
  if (layer < 0) {
    if (name == "model.embed_tokens.weight" || name == "model.norm.weight") return {};
    if (name == "lm_head.weight") return {0, {k.vocab}};
    throw unknown();
  }
  if (layer >= c.layers) throw unknown();
  if (s == "input_layernorm.weight" || s == "post_attention_layernorm.weight") return {};
  if (s == "mlp.gate_proj.weight" || s == "mlp.up_proj.weight") return {0, {k.intermediate}};
  if (s == "mlp.down_proj.weight") return {1, {k.intermediate}};
  if (c.is_full_attention(layer)) {
    const int64_t D = c.D;
    if (s == "self_attn.q_proj.weight") return {0, {scaled(k.q_heads, 2 * D)}};
    if (s == "self_attn.k_proj.weight" || s == "self_attn.v_proj.weight") return {0, {scaled(k.kv_heads, D)}};
    if (s == "self_attn.o_proj.weight") return {1, {scaled(k.q_heads, D)}};
    if (s == "self_attn.q_norm.weight" || s == "self_attn.k_norm.weight") return {};
    throw unknown();
  }
  if (s == "linear_attn.in_proj_qkv.weight" || s == "linear_attn.conv1d.weight") {
    const int64_t qk = static_cast<int64_t>(g.Hk) * g.Dk;  // channels: q [0, qk) | k [qk, 2 qk) | v
    return {0, {scaled(k.k_heads, g.Dk), scaled(k.k_heads, g.Dk, qk), scaled(k.v_heads, g.Dv, 2 * qk)}};
  }
  if (s == "linear_attn.in_proj_z.weight") return {0, {scaled(k.v_heads, g.Dv)}};
  if (s == "linear_attn.in_proj_b.weight" || s == "linear_attn.in_proj_a.weight" || s == "linear_attn.dt_bias" ||
      s == "linear_attn.A_log")
    return {0, {k.v_heads}};
  if (s == "linear_attn.norm.weight") return {};
  if (s == "linear_attn.out_proj.weight") return {1, {scaled(k.v_heads, g.Dv)}};
  throw unknown();
}

std::vector<std::pair<std::string, std::vector<int64_t>>> tp_expected_weights(const Qwen35Config& c, const TpPlan& plan,
                                                                              int r) {
  const TpRank& k = plan_rank(c, plan, r);
  return expected_weights(k.config, k.vocab.size());
}

int64_t tp_greedy(const std::vector<std::pair<float, int64_t>>& per_rank) {
  if (per_rank.empty()) throw Error("tensor parallel: no rank's largest logit to choose from");
  size_t best = 0;
  for (size_t i = 0; i < per_rank.size(); ++i) {
    if (std::isnan(per_rank[i].first)) return per_rank[i].second;  // the first NaN wins
    if (per_rank[i].first > per_rank[best].first) best = i;        // ties keep the earlier rank
  }
  return per_rank[best].second;
}

HostWeights shard_weights(const Qwen35Config& c, const HostWeights& w, const TpPlan& plan, int r) {
  check_weights(c, w);
  HostWeights out;
  for (const auto& [name, shape] : tp_expected_weights(c, plan, r)) {
    const bool tied_head = name == "lm_head.weight" && c.tie_word_embeddings;
    const HostTensor& src = w.at(tied_head ? "model.embed_tokens.weight" : name);
    const TpSlice sl = tp_slice(c, plan, r, name);
    HostTensor t;
    t.shape = shape;
    if (sl.dim < 0) {
      t.data = src.data;
    } else {
      // inner: the values of one index of the split dimension (the product of the dimensions
      // after it); outer: the product of the dimensions before it.
      int64_t inner = 1, outer = 1;
      for (size_t d = static_cast<size_t>(sl.dim) + 1; d < src.shape.size(); ++d) inner *= src.shape[d];
      for (size_t d = 0; d < static_cast<size_t>(sl.dim); ++d) outer *= src.shape[d];
      const int64_t along = src.shape[static_cast<size_t>(sl.dim)];
      for (const TpRange& piece : sl.pieces)
        if (piece.begin < 0 || piece.end > along || piece.begin > piece.end)
          throw Error(fmt::format("tensor parallel: rank {}'s piece [{}, {}) of {} is outside its {} entries", r,
                                  piece.begin, piece.end, name, along));
      t.data.reserve(static_cast<size_t>(t.numel()));
      for (int64_t o = 0; o < outer; ++o)
        for (const TpRange& piece : sl.pieces)
          t.data.insert(t.data.end(), src.data.begin() + (o * along + piece.begin) * inner,
                        src.data.begin() + (o * along + piece.end) * inner);
    }
    if (static_cast<int64_t>(t.data.size()) != t.numel())
      throw Error(fmt::format("tensor parallel: rank {}'s {} took {} values for its shape of {}", r, name,
                              t.data.size(), t.numel()));
    out.emplace(name, std::move(t));
  }
  return out;
}

}  // namespace sg
