// CPU tests of the tensor-parallel plan (models/tp_plan.h): the heads, channels, intermediate rows
// and vocabulary rows of every preset land on exactly one rank; rank counts the model does not
// divide are refused with the sizes named; every checkpoint tensor's pieces tile its split
// dimension once over the ranks; the ranks' tensors have their rank model's shapes; a rank's
// memory plan holds 1/R of the split weights, caches and states; and, with the
// reference ops on the ranks' tensors, the sum of the ranks' outputs of a GDN mixer, an attention
// mixer and an MLP is the whole model's output, the greedy token from the ranks' LM head rows is
// the whole row's, and the reference model run over ranks (tp_reference.h) generates the whole
// model's tokens.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/error.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/conv_ref.h"
#include "kernels/ref/delta_rule_ref.h"
#include "kernels/ref/mlp_ref.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/ref/postconv_ref.h"
#include "models/hf_config.h"
#include "models/memory_plan.h"
#include "models/reference_model.h"
#include "models/safetensors.h"
#include "models/tp_plan.h"
#include "models/tp_reference.h"
#include "tests/support/catch.h"
#include "tests/support/expect_error.h"
#include "tests/support/random.h"

using namespace sg;

namespace {

using sg::test::expect_error;

// The ranges of every rank, which must tile [0, n) in rank order.
void check_tiles(const std::vector<TpRange>& parts, int64_t n) {
  int64_t at = 0;
  for (const TpRange& p : parts) {
    CHECK(p.begin == at);
    CHECK(p.size() >= 0);
    at = p.end;
  }
  CHECK(at == n);
}

template <typename F>
std::vector<TpRange> of_ranks(const TpPlan& p, F f) {
  std::vector<TpRange> out;
  for (const TpRank& r : p.rank) out.push_back(f(r));
  return out;
}

// The largest |a - b| over the largest |b|.
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::fabs(double(b[i])));
  }
  return worst / scale;
}

const std::vector<float>& tensor(const HostWeights& w, const std::string& name) { return w.at(name).data; }
std::string layer(int i, const std::string& s) { return "model.layers." + std::to_string(i) + "." + s; }

// One GDN mixer (prefill of T tokens from a zero state, no history) on the reference ops, in f32:
// in_proj -> conv -> postconv -> recurrent delta rule -> gated norm with z -> out_proj. [T, H].
std::vector<float> gdn_mixer(const Qwen35Config& c, const HostWeights& w, int L, const std::vector<float>& x, int T) {
  const GdnDims& g = c.gdn;
  const int H = c.hidden, C = g.C(), HvDv = g.Hv * g.Dv;
  std::vector<float> qkv(size_t(T) * C), z(size_t(T) * HvDv), b(size_t(T) * g.Hv), a(size_t(T) * g.Hv);
  ref::linear(x.data(), tensor(w, layer(L, "linear_attn.in_proj_qkv.weight")).data(), qkv.data(), T, H, C);
  ref::linear(x.data(), tensor(w, layer(L, "linear_attn.in_proj_z.weight")).data(), z.data(), T, H, HvDv);
  ref::linear(x.data(), tensor(w, layer(L, "linear_attn.in_proj_b.weight")).data(), b.data(), T, H, g.Hv);
  ref::linear(x.data(), tensor(w, layer(L, "linear_attn.in_proj_a.weight")).data(), a.data(), T, H, g.Hv);
  const int32_t cu[2] = {0, T}, slot[1] = {0};
  const uint8_t hist[1] = {0};
  std::vector<float> conv_state(size_t(C) * (g.K - 1)), conv(size_t(T) * C);
  ref::conv_fwd({C, g.K, true, ref::Store::f32, ref::Store::f32}, 1, cu, qkv.data(), C, slot, hist, conv_state.data(),
                tensor(w, layer(L, "linear_attn.conv1d.weight")).data(), nullptr, conv.data());
  std::vector<float> q(size_t(T) * g.Hk * g.Dk), k(q.size()), v(size_t(T) * HvDv), gg(size_t(T) * g.Hv),
      beta(gg.size());
  ref::postconv({g.Hk, g.Hv, g.Dk, g.Dv, ref::Store::f32}, T, conv.data(), C, a.data(), g.Hv, b.data(), g.Hv,
                tensor(w, layer(L, "linear_attn.A_log")).data(), tensor(w, layer(L, "linear_attn.dt_bias")).data(),
                q.data(), k.data(), v.data(), gg.data(), beta.data());
  std::vector<float> state(size_t(g.Hv) * g.Dk * g.Dv), core(size_t(T) * HvDv), y(core.size());
  ref::delta_rule_prefill_recurrent({g.Hk, g.Hv, g.Dk, g.Dv, ref::Store::f32, ref::Store::f32}, 1, cu, q.data(),
                                    k.data(), v.data(), gg.data(), beta.data(), slot, hist, state.data(), core.data());
  ref::gated_rmsnorm(core.data(), z.data(), tensor(w, layer(L, "linear_attn.norm.weight")).data(), y.data(),
                     int64_t{T} * g.Hv, g.Dv, c.rms_eps);
  std::vector<float> out(size_t(T) * H);
  ref::linear(y.data(), tensor(w, layer(L, "linear_attn.out_proj.weight")).data(), out.data(), T, HvDv, H);
  return out;
}

// One attention mixer's head arithmetic (q_proj, k_proj, v_proj -> causal GQA attention with the
// gate -> o_proj; q_norm, k_norm and RoPE left out: they act on each head alone). [T, H].
std::vector<float> attn_mixer(const Qwen35Config& c, const HostWeights& w, int L, const std::vector<float>& x, int T) {
  const int H = c.hidden, Hq = c.Hq, Hkv = c.Hkv, D = c.D;
  std::vector<float> qg(size_t(T) * 2 * Hq * D), q(size_t(T) * Hq * D), gate(q.size()), k(size_t(T) * Hkv * D),
      v(k.size()), o(q.size()), out(size_t(T) * H);
  ref::linear(x.data(), tensor(w, layer(L, "self_attn.q_proj.weight")).data(), qg.data(), T, H, 2 * Hq * D);
  ref::linear(x.data(), tensor(w, layer(L, "self_attn.k_proj.weight")).data(), k.data(), T, H, Hkv * D);
  ref::linear(x.data(), tensor(w, layer(L, "self_attn.v_proj.weight")).data(), v.data(), T, H, Hkv * D);
  ref::split_q_gate(qg.data(), q.data(), gate.data(), T, Hq, D);
  const int32_t cu[2] = {0, T};
  ref::attention_prefill(q.data(), k.data(), v.data(), gate.data(), cu, nullptr, o.data(), T, 1, Hq, Hkv, D);
  ref::linear(o.data(), tensor(w, layer(L, "self_attn.o_proj.weight")).data(), out.data(), T, Hq * D, H);
  return out;
}

std::vector<float> mlp(const Qwen35Config& c, const HostWeights& w, int L, const std::vector<float>& x, int T) {
  std::vector<float> out(size_t(T) * c.hidden);
  ref::swiglu_mlp(x.data(), tensor(w, layer(L, "mlp.gate_proj.weight")).data(),
                  tensor(w, layer(L, "mlp.up_proj.weight")).data(), tensor(w, layer(L, "mlp.down_proj.weight")).data(),
                  out.data(), T, c.hidden, c.intermediate);
  return out;
}

}  // namespace

TEST_CASE("tp plan: every head, intermediate row and vocabulary row is on exactly one rank", "[tp]") {
  for (const std::string& name : preset_names()) {
    const Qwen35Config c = preset(name);
    for (int R : {1, 2, 4}) {
      if (c.gdn.Hk % R || c.Hq % R || c.Hkv % R || c.intermediate % R) continue;
      INFO(name << " over " << R << " ranks");
      const TpPlan p = tp_plan(c, R);
      REQUIRE(p.ranks() == R);
      REQUIRE(static_cast<int>(p.rank.size()) == R);
      check_tiles(of_ranks(p, [](const TpRank& r) { return r.k_heads; }), c.gdn.Hk);
      check_tiles(of_ranks(p, [](const TpRank& r) { return r.v_heads; }), c.gdn.Hv);
      check_tiles(of_ranks(p, [](const TpRank& r) { return r.q_heads; }), c.Hq);
      check_tiles(of_ranks(p, [](const TpRank& r) { return r.kv_heads; }), c.Hkv);
      check_tiles(of_ranks(p, [](const TpRank& r) { return r.intermediate; }), c.intermediate);
      check_tiles(of_ranks(p, [](const TpRank& r) { return r.vocab; }), c.vocab);
      const int64_t per_key = c.gdn.Hv / c.gdn.Hk, per_kv = c.Hq / c.Hkv;
      for (const TpRank& r : p.rank) {
        // A rank's value heads are those of its key heads, its query heads those of its KV heads.
        CHECK(r.v_heads.begin == r.k_heads.begin * per_key);
        CHECK(r.v_heads.end == r.k_heads.end * per_key);
        CHECK(r.q_heads.begin == r.kv_heads.begin * per_kv);
        CHECK(r.q_heads.end == r.kv_heads.end * per_kv);
        CHECK(r.vocab.size() > 0);
        CHECK(r.config.gdn.Hk == c.gdn.Hk / R);
        CHECK(r.config.gdn.Hv == c.gdn.Hv / R);
        CHECK(r.config.Hq == c.Hq / R);
        CHECK(r.config.Hkv == c.Hkv / R);
        CHECK(r.config.intermediate == c.intermediate / R);
        CHECK(r.config.hidden == c.hidden);
        CHECK(r.config.vocab == c.vocab);
        CHECK(r.config.layer_types == c.layer_types);
        CHECK_FALSE(r.config.tie_word_embeddings);
      }
    }
  }
}

TEST_CASE("tp plan: rank counts the model does not divide are refused, the sizes named", "[tp]") {
  const Qwen35Config c4 = preset("qwen3.5-4b");
  expect_error([&] { tp_plan(c4, 3); }, {"3 ranks", "sizes of 'qwen3.5-4b'", "GDN key heads 16",
                                         "attention query heads 16", "KV heads 4"});  // 9216 = 3 x 3072
  Qwen35Config odd = c4;
  odd.intermediate = 9218;
  expect_error([&] { tp_plan(odd, 4); }, {"4 ranks", "the size of", "(intermediate size 9218)"});
  expect_error([&] { tp_plan(c4, 8); }, {"8 ranks", "KV heads 4"});
  expect_error([&] { tp_plan(c4, 0); }, {"at least 1", "got 0"});
  expect_error([&] { tp_plan(c4, -2); }, {"at least 1"});
  const Qwen35Config c27 = preset("qwen3.5-27b");
  CHECK_NOTHROW(tp_plan(c27, 4));  // Hq 24, Hkv 4, Hk 16, I 17408
  expect_error([&] { tp_plan(c27, 16); }, {"attention query heads 24", "KV heads 4"});
  Qwen35Config small = preset("tiny");  // vocab 256
  small.vocab = 5;
  small.Hq = small.Hkv = 4;
  small.gdn.Hk = small.gdn.Hv = 4;
  expect_error([&] { tp_plan(small, 4); }, {"leave the last rank none", "5 rows"});
}

TEST_CASE("tp slices: every tensor's pieces tile its split dimension once over the ranks", "[tp]") {
  for (const std::string& name : {std::string("qwen3.5-4b"), std::string("tiny"), std::string("tiny-dkdv")}) {
    const Qwen35Config c = preset(name);
    const TpPlan p = tp_plan(c, 2);
    auto all = expected_weights(c);
    if (c.tie_word_embeddings) all.push_back({"lm_head.weight", {c.vocab, c.hidden}});
    for (const auto& [tname, shape] : all) {
      INFO(name << ": " << tname);
      std::vector<TpSlice> s;
      for (int r = 0; r < p.ranks(); ++r) s.push_back(tp_slice(c, p, r, tname));
      for (const TpSlice& x : s) CHECK(x.dim == s[0].dim);
      if (s[0].dim < 0) continue;  // whole on every rank
      REQUIRE(s[0].dim < static_cast<int>(shape.size()));
      // Every index of the split dimension in exactly one piece of one rank.
      std::vector<int> hits(static_cast<size_t>(shape[static_cast<size_t>(s[0].dim)]), 0);
      for (const TpSlice& x : s)
        for (const TpRange& piece : x.pieces) {
          REQUIRE(piece.begin >= 0);
          REQUIRE(piece.end <= static_cast<int64_t>(hits.size()));
          for (int64_t i = piece.begin; i < piece.end; ++i) ++hits[static_cast<size_t>(i)];
        }
      CHECK(std::count(hits.begin(), hits.end(), 1) == static_cast<std::ptrdiff_t>(hits.size()));
    }
    expect_error([&] { tp_slice(c, p, 0, "model.layers.0.mlp.nope.weight"); }, {"is not a tensor of"});
    expect_error([&] { tp_slice(c, p, 0, "model.layers.999.mlp.gate_proj.weight"); }, {"is not a tensor of"});
    expect_error([&] { tp_slice(c, p, 2, "model.norm.weight"); }, {"rank 2 outside [0, 2)"});
    expect_error([&] { tp_slice(c, p, 0, "model.layers.00.mlp.gate_proj.weight"); }, {"is not a tensor of"});
    expect_error([&] { tp_slice(c, TpPlan{}, 0, "model.norm.weight"); }, {"not made by tp_plan"});
    expect_error([&] { tp_expected_weights(c, tp_plan(preset("qwen3.5-27b"), 2), 0); }, {"not made by tp_plan"});
  }
}

TEST_CASE("shard_weights: each rank's tensors have its model's shapes, and a tied head takes the embedding's rows",
          "[tp]") {
  const Qwen35Config c = preset("tiny-dkdv");  // tied embeddings, Hv / Hk = 3, Dk != Dv
  REQUIRE(c.tie_word_embeddings);
  const HostWeights w = synthetic_weights(c, 7);
  const TpPlan p = tp_plan(c, 2);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const HostWeights s = shard_weights(c, w, p, r);
    const auto want = tp_expected_weights(c, p, r);
    REQUIRE(s.size() == want.size());
    for (const auto& [name, shape] : want) {
      INFO(name);
      REQUIRE(s.count(name) == 1);
      CHECK(s.at(name).shape == shape);
      CHECK(static_cast<int64_t>(s.at(name).data.size()) == s.at(name).numel());
    }
    // The head: the embedding's rows of this rank's vocabulary range.
    const TpRange v = p.rank[static_cast<size_t>(r)].vocab;
    const auto& head = s.at("lm_head.weight").data;
    const auto& emb = w.at("model.embed_tokens.weight").data;
    REQUIRE(head.size() == static_cast<size_t>(v.size() * c.hidden));
    CHECK(std::equal(head.begin(), head.end(), emb.begin() + v.begin * c.hidden));
    CHECK(s.at("model.embed_tokens.weight").data == emb);  // the embedding itself is whole
  }
}

TEST_CASE("tp on the reference ops: the ranks' summed outputs are the whole mixer's and MLP's", "[tp]") {
  for (const std::string& name : {std::string("tiny"), std::string("tiny-dkdv")}) {
    const Qwen35Config c = preset(name);
    const HostWeights w = synthetic_weights(c, 11);
    const int T = 9;
    const std::vector<float> x = test::uniform(size_t(T) * c.hidden, 5);
    for (int R : {1, 2}) {
      const TpPlan p = tp_plan(c, R);
      std::vector<HostWeights> shards;
      for (int r = 0; r < R; ++r) shards.push_back(shard_weights(c, w, p, r));
      for (int L = 0; L < c.layers; ++L) {
        INFO(name << " over " << R << " ranks, layer " << L);
        const std::vector<float> whole_mix =
            c.is_full_attention(L) ? attn_mixer(c, w, L, x, T) : gdn_mixer(c, w, L, x, T);
        const std::vector<float> whole_mlp = mlp(c, w, L, x, T);
        std::vector<float> mix(whole_mix.size(), 0.0f), m(whole_mlp.size(), 0.0f);
        for (int r = 0; r < R; ++r) {
          const Qwen35Config& rc = p.rank[static_cast<size_t>(r)].config;
          const HostWeights& sw = shards[static_cast<size_t>(r)];
          const auto part = c.is_full_attention(L) ? attn_mixer(rc, sw, L, x, T) : gdn_mixer(rc, sw, L, x, T);
          const auto mpart = mlp(rc, sw, L, x, T);
          for (size_t i = 0; i < mix.size(); ++i) mix[i] += part[i];  // the all-reduce
          for (size_t i = 0; i < m.size(); ++i) m[i] += mpart[i];
        }
        // f32 partial sums of double-accumulated products: a few f32 ulps of the output's scale.
        CHECK(rel_diff(mix, whole_mix) < 1e-5);
        CHECK(rel_diff(m, whole_mlp) < 1e-5);
        if (R == 1) {  // one rank is the whole model, to the bit
          CHECK(mix == whole_mix);
          CHECK(m == whole_mlp);
        }
      }
    }
  }
}

TEST_CASE("tp greedy: the ranks' (largest, first index) pairs give the whole row's argmax", "[tp]") {
  const Qwen35Config c = preset("tiny");  // vocab 256
  const TpPlan p = tp_plan(c, 2);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto greedy = [&](const std::vector<float>& row) {
    std::vector<std::pair<float, int64_t>> per_rank;
    for (const TpRank& r : p.rank) {
      const int64_t i = r.vocab.begin + ref::argmax(row.data() + r.vocab.begin, r.vocab.size());
      per_rank.push_back({row[static_cast<size_t>(i)], i});
    }
    return tp_greedy(per_rank);
  };
  std::vector<std::vector<float>> rows;
  rows.push_back(test::uniform(256, 3));
  std::vector<float> tie(256, 0.0f);  // the same largest value on both ranks: the first index wins
  tie[200] = tie[40] = 2.0f;
  rows.push_back(tie);
  std::vector<float> late_nan = test::uniform(256, 4);  // a NaN counts as the largest
  late_nan[250] = nan;
  late_nan[10] = inf;
  rows.push_back(late_nan);
  std::vector<float> two_nan = late_nan;  // the first NaN wins
  two_nan[130] = nan;
  rows.push_back(two_nan);
  rows.push_back(std::vector<float>(256, -inf));
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    CHECK(greedy(rows[i]) == ref::argmax(rows[i].data(), 256));
  }
  CHECK(greedy(tie) == 40);
  CHECK(greedy(two_nan) == 130);
  expect_error([] { tp_greedy({}); }, {"no rank"});
}

TEST_CASE("tp memory: a rank's plan holds 1/R of the split weights, the KV cache and the SSM state", "[tp]") {
  StepLayoutParams lp;
  lp.num_slots = 64;
  lp.max_context = 8192;
  lp.max_decode_batch = 32;
  lp.max_prefill_tokens = 4096;
  lp.max_prefill_seqs = 8;
  auto replicated = [](const MemoryPlan& m) {  // the embedding and every norm weight: whole on each rank
    size_t b = 0;
    for (const MemoryEntry& e : m.entries) {
      const std::string& n = e.name;
      auto ends = [&](const std::string& s) {
        return n.size() >= s.size() && n.compare(n.size() - s.size(), s.size(), s) == 0;
      };
      if (e.category == MemoryCategory::weights &&
          (n == "embed_tokens" || n == "norm" || ends("layernorm") || ends("_norm") || ends("linear_attn.norm")))
        b += e.bytes;
    }
    return b;
  };
  auto weight_entries = [](const MemoryPlan& m) {
    int64_t n = 0;
    for (const MemoryEntry& e : m.entries) n += e.category == MemoryCategory::weights ? e.count : 0;
    return n;
  };
  for (const std::string& name : {std::string("qwen3.5-27b"), std::string("qwen3.5-4b")}) {
    const Qwen35Config c = preset(name);
    const MemoryPlan whole = plan_memory(c, lp);
    // A tied head is the embedding in the whole model and its own rows on a rank.
    const size_t head = c.tie_word_embeddings ? static_cast<size_t>(c.vocab) * c.hidden * 2 : 0;
    const size_t split_whole = whole.bytes_of(MemoryCategory::weights) - replicated(whole) + head;
    for (int R : {2, 4}) {
      const TpPlan p = tp_plan(c, R);
      for (const TpRank& r : p.rank) {
        INFO(name << ", rank " << r.rank << " of " << R);
        StepLayoutParams rp = lp;
        rp.head_rows = r.vocab.size();
        const MemoryPlan m = plan_memory(r.config, rp);
        CHECK(m.bytes_of(MemoryCategory::kv_cache) * R == whole.bytes_of(MemoryCategory::kv_cache));
        CHECK(m.bytes_of(MemoryCategory::ssm_state) * R == whole.bytes_of(MemoryCategory::ssm_state));
        CHECK(replicated(m) == replicated(whole));
        CHECK(replicated(m) > static_cast<size_t>(c.vocab) * c.hidden * 2);  // the norms were found too
        // The split weights: 1/R, up to the arena's 256-byte rounding of each tensor (and the
        // vocabulary's remainder on the last rank).
        const double split = static_cast<double>(m.bytes_of(MemoryCategory::weights) - replicated(m));
        const double slop = 256.0 * static_cast<double>(weight_entries(m)) + static_cast<double>(c.hidden) * 2 * R;
        CHECK(std::fabs(split * R - static_cast<double>(split_whole)) <= slop * R);
      }
    }
  }
  StepLayoutParams bad = lp;
  bad.head_rows = preset("tiny").vocab + 1;
  expect_error([&] { plan_memory(preset("tiny"), bad); }, {"head_rows must be in [0, 256]"});
}

TEST_CASE("tp reference: the ranks' greedy tokens and logits are the whole model's", "[tp]") {
  for (const std::string& name : {std::string("tiny"), std::string("tiny-dkdv")}) {
    const Qwen35Config c = preset(name);
    const HostWeights w = synthetic_weights(c, 21);
    const std::vector<int64_t> prompt = {5, 17, 200, 3, 99, 42, 7};
    const int max_new = 10;
    ReferenceModel whole(c, w, 1, static_cast<int64_t>(prompt.size()) + max_new);
    const std::vector<float> first = whole.prefill({Sequence{0, prompt}});
    whole.reset(0);
    const std::vector<int64_t> tokens = whole.generate(prompt, max_new);
    for (int R : {1, 2}) {
      INFO(name << " over " << R << " ranks");
      const TpGeneration g = tp_generate(c, w, R, prompt, max_new);
      CHECK(g.tokens == tokens);
      CHECK(rel_diff(g.first_logits, first) < 1e-5);
      if (R == 1) CHECK(g.first_logits == first);  // one rank is the whole model, to the bit
    }
  }
  {  // a Hugging Face checkpoint (the test fixture with 2 key heads, 4 value heads, GQA 2:1)
    const std::filesystem::path dir = std::filesystem::path(SG_TEST_SOURCE_DIR) / "tests/fixtures/h72-hv2x-dk16-dv24";
    const Qwen35Config c = load_hf_config(dir / "config.json");
    const HostWeights w = load_weights(Checkpoint::open(dir), c);
    ReferenceModel whole(c, w, 1, 3 + 12);
    CHECK(tp_generate(c, w, 2, {1, 2, 3}, 12).tokens == whole.generate({1, 2, 3}, 12));
  }
  const Qwen35Config c = preset("tiny");
  const HostWeights w = synthetic_weights(c, 21);
  expect_error([&] { tp_generate(c, w, 2, {}, 4); }, {"the prompt is empty"});
  expect_error([&] { tp_generate(c, w, 2, {1, 256}, 4); }, {"token 256 outside [0, 256)"});
  expect_error([&] { tp_generate(c, w, 2, {1}, 0); }, {"max_new (0) must be >= 1"});
  expect_error([&] { tp_generate(c, w, 3, {1}, 2); }, {"3 ranks"});
  // A rank that fails stops every rank, and the run reports the first failure, not a hang.
  ReferenceOptions bad;
  bad.chunk = 0;  // refused by every rank's model
  try {
    tp_generate(c, w, 2, {1, 2}, 2, bad);
    FAIL("expected the ranks' refusal");
  } catch (const std::invalid_argument& e) {  // ReferenceModel's own error, passed on
    CHECK(std::string(e.what()).find("chunk (0) must be >= 1") != std::string::npos);
  }
  // One rank failing alone, in an all-reduce of the prefill (tiny: 6 layers, 2 a layer), in one of
  // the decode steps, and at a greedy gather: the others stop at their next collective.
  for (const TpFault f : {TpFault{1, 3}, TpFault{0, 20}, TpFault{1, 12}, TpFault{0, 0}}) {
    INFO("rank " << f.rank << " at collective " << f.collective);
    expect_error(
        [&] {
          tp_generate(c, w, 2, {1, 2, 3}, 4, {}, f);
        },
        {fmt::format("rank {} failed at collective {} (drill)", f.rank, f.collective)});
  }
  // A drill past the last collective changes nothing.
  ReferenceModel whole(c, w, 1, 3 + 4);
  CHECK(tp_generate(c, w, 2, {1, 2, 3}, 4, {}, TpFault{1, 100000}).tokens == whole.generate({1, 2, 3}, 4));
}
