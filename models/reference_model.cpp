// reference_model.cpp: the CPU reference forward of the Qwen3.5 text model, composed from the
// reference ops in kernels/ref/. See reference_model.h.
#include "models/reference_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "engine/host_memory.h"
#include "engine/text.h"
#include "kernels/numeric.h"
#include "kernels/ref/conv_ref.h"
#include "kernels/ref/delta_rule_ref.h"
#include "kernels/ref/mlp_ref.h"
#include "kernels/ref/norm_ref.h"
#include "kernels/ref/postconv_ref.h"
#include "kernels/ref/rope_ref.h"
#include "models/reference_memory.h"

namespace sg {
namespace {

using ref::Store;

// ---- the few config facts this file needs, in one place ----

bool layer_is_attention(const Qwen35Config& c, int i) { return c.is_full_attention(i); }
bool tied_embeddings(const Qwen35Config& c) { return c.tie_word_embeddings; }
int rotary_dim_of(const Qwen35Config& c) { return c.rotary_dim(); }

std::string layer_name(int i, const std::string& suffix) { return fmt::format("model.layers.{}.{}", i, suffix); }

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("ReferenceModel: " + msg); }

// ---- deterministic synthetic values ----

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

// A stream of uniform floats in [0, 1) (24 random bits each), keyed by (seed, name).
struct Stream {
  uint64_t state;
  Stream(uint64_t seed, const std::string& name) : state(seed ^ fnv1a(name)) { splitmix64(state); }
  float next() { return static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f); }
  float uniform(float lo, float hi) { return lo + (hi - lo) * next(); }
};

HostTensor make_tensor(std::vector<int64_t> shape, uint64_t seed, const std::string& name, float lo, float hi,
                       float offset = 0.f) {
  HostTensor t;
  t.shape = std::move(shape);
  t.data.resize(static_cast<size_t>(t.numel()));
  Stream s(seed, name);
  for (auto& x : t.data) x = round_bf16(offset + s.uniform(lo, hi));
  return t;
}

}  // namespace

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> expected_weights(const Qwen35Config& c, int64_t head_rows) {
  const int64_t H = c.hidden, I = c.intermediate, V = c.vocab;
  const int64_t Hq = c.Hq, Hkv = c.Hkv, D = c.D;
  const GdnDims& g = c.gdn;
  std::vector<std::pair<std::string, std::vector<int64_t>>> e;
  e.push_back({"model.embed_tokens.weight", {V, H}});
  for (int i = 0; i < c.layers; ++i) {
    e.push_back({layer_name(i, "input_layernorm.weight"), {H}});
    e.push_back({layer_name(i, "post_attention_layernorm.weight"), {H}});
    if (layer_is_attention(c, i)) {
      e.push_back({layer_name(i, "self_attn.q_proj.weight"), {2 * Hq * D, H}});
      e.push_back({layer_name(i, "self_attn.k_proj.weight"), {Hkv * D, H}});
      e.push_back({layer_name(i, "self_attn.v_proj.weight"), {Hkv * D, H}});
      e.push_back({layer_name(i, "self_attn.o_proj.weight"), {H, Hq * D}});
      e.push_back({layer_name(i, "self_attn.q_norm.weight"), {D}});
      e.push_back({layer_name(i, "self_attn.k_norm.weight"), {D}});
    } else {
      const int64_t C = g.C(), Hv = g.Hv, Dv = g.Dv;
      e.push_back({layer_name(i, "linear_attn.in_proj_qkv.weight"), {C, H}});
      e.push_back({layer_name(i, "linear_attn.in_proj_z.weight"), {Hv * Dv, H}});
      e.push_back({layer_name(i, "linear_attn.in_proj_b.weight"), {Hv, H}});
      e.push_back({layer_name(i, "linear_attn.in_proj_a.weight"), {Hv, H}});
      e.push_back({layer_name(i, "linear_attn.conv1d.weight"), {C, 1, g.K}});
      e.push_back({layer_name(i, "linear_attn.dt_bias"), {Hv}});
      e.push_back({layer_name(i, "linear_attn.A_log"), {Hv}});
      e.push_back({layer_name(i, "linear_attn.norm.weight"), {Dv}});
      e.push_back({layer_name(i, "linear_attn.out_proj.weight"), {H, Hv * Dv}});
    }
    e.push_back({layer_name(i, "mlp.gate_proj.weight"), {I, H}});
    e.push_back({layer_name(i, "mlp.up_proj.weight"), {I, H}});
    e.push_back({layer_name(i, "mlp.down_proj.weight"), {H, I}});
  }
  e.push_back({"model.norm.weight", {H}});
  if (head_rows > 0 || !tied_embeddings(c)) e.push_back({"lm_head.weight", {head_rows > 0 ? head_rows : V, H}});
  return e;
}

void check_weights(const Qwen35Config& c, const HostWeights& w, int64_t head_rows) {
  std::vector<std::string> problems;
  for (const auto& [name, shape] : expected_weights(c, head_rows)) {
    auto it = w.find(name);
    if (it == w.end()) {
      problems.push_back(fmt::format("missing {} {}", name, shape_str(shape)));
    } else if (it->second.shape != shape) {
      problems.push_back(
          fmt::format("{} has shape {}, expected {}", name, shape_str(it->second.shape), shape_str(shape)));
    } else if (static_cast<int64_t>(it->second.data.size()) != it->second.numel()) {
      problems.push_back(
          fmt::format("{} holds {} values for shape {}", name, it->second.data.size(), shape_str(shape)));
    }
  }
  if (!problems.empty()) {
    std::string msg = fmt::format("{} weight problem(s) for config '{}':", problems.size(), c.name);
    const size_t shown = std::min<size_t>(problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) msg += "\n  " + problems[i];
    if (shown < problems.size()) msg += fmt::format("\n  ... and {} more", problems.size() - shown);
    fail(msg);
  }
}

HostWeights synthetic_weights(const Qwen35Config& c, uint64_t seed) {
  check_host_memory(reference_weight_bytes(c), fmt::format("the f32 synthetic weights of '{}'", printable(c.name)),
                    "every tensor of the config");
  HostWeights w;
  for (const auto& [name, shape] : expected_weights(c)) {
    auto ends_with = [&](const char* s) {
      const std::string suf(s);
      return name.size() >= suf.size() && name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
    };
    if (name == "model.embed_tokens.weight") {
      w[name] = make_tensor(shape, seed, name, -1.f, 1.f);
    } else if (ends_with("linear_attn.conv1d.weight")) {
      const float a = std::sqrt(3.f / static_cast<float>(shape[2]));
      w[name] = make_tensor(shape, seed, name, -a, a);
    } else if (ends_with("linear_attn.norm.weight")) {
      w[name] = make_tensor(shape, seed, name, -0.1f, 0.1f, 1.f);
    } else if (ends_with("norm.weight") || ends_with("layernorm.weight")) {
      w[name] = make_tensor(shape, seed, name, -0.1f, 0.1f);  // zero-centred: scale 1 + w
    } else if (ends_with("linear_attn.A_log")) {
      HostTensor t = make_tensor(shape, seed, name, 1.f, 16.f);
      for (auto& x : t.data) x = round_bf16(std::log(x));
      w[name] = std::move(t);
    } else if (ends_with("linear_attn.dt_bias")) {
      w[name] = make_tensor(shape, seed, name, -0.5f, 0.5f);
    } else {
      // A linear weight [out, in] (lm_head included).
      const float a = std::sqrt(3.f / static_cast<float>(shape[1]));
      w[name] = make_tensor(shape, seed, name, -a, a);
    }
  }
  return w;
}

// ---- the model ----

struct ReferenceModel::Packed {
  int N = 0;                         // rows (sequences)
  int64_t T = 0;                     // total tokens
  std::vector<int64_t> tokens;       // [T]
  std::vector<int32_t> slots;        // [N]
  std::vector<int32_t> cu;           // [N + 1]
  std::vector<uint8_t> has_history;  // [N]
  std::vector<int64_t> positions;    // [T] absolute position of each token
};

ReferenceModel::ReferenceModel(const Qwen35Config& config, HostWeights weights, int num_slots, int64_t max_context,
                               ReferenceOptions options)
    : cfg_(config), weights_(std::move(weights)), opt_(options), num_slots_(num_slots), max_context_(max_context) {
  if (num_slots < 1) fail(fmt::format("num_slots ({}) must be >= 1", num_slots));
  if (max_context < 1) fail(fmt::format("max_context ({}) must be >= 1", max_context));
  if (opt_.chunk < 1) fail(fmt::format("chunk ({}) must be >= 1", opt_.chunk));
  const GdnDims& g = cfg_.gdn;
  if (cfg_.hidden < 1 || cfg_.layers < 1 || cfg_.intermediate < 1 || cfg_.vocab < 1 || cfg_.Hq < 1 || cfg_.Hkv < 1 ||
      cfg_.D < 1 || g.Hk < 1 || g.Hv < 1 || g.Dk < 1 || g.Dv < 1 || g.K < 1) {
    fail(fmt::format("config '{}' has a size < 1", cfg_.name));
  }
  if (cfg_.Hq % cfg_.Hkv != 0) fail(fmt::format("Hq ({}) must be a multiple of Hkv ({})", cfg_.Hq, cfg_.Hkv));
  if (g.Hv % g.Hk != 0) fail(fmt::format("Hv ({}) must be a multiple of Hk ({})", g.Hv, g.Hk));
  if (cfg_.layer_types.size() != static_cast<size_t>(cfg_.layers)) {
    fail(fmt::format("config '{}' has {} layer_types for {} layers", cfg_.name, cfg_.layer_types.size(), cfg_.layers));
  }
  rotary_ = rotary_dim_of(cfg_);
  if (rotary_ < 0 || rotary_ > cfg_.D || rotary_ % 2 != 0) {
    fail(fmt::format("rotary dim {} (head_dim {} * partial_rotary_factor) must be even and in [0, {}]", rotary_, cfg_.D,
                     cfg_.D));
  }
  if (opt_.head_rows < 0 || opt_.head_rows > cfg_.vocab)
    fail(fmt::format("head_rows ({}) must be in [0, {}]", opt_.head_rows, cfg_.vocab));
  check_weights(cfg_, weights_, opt_.head_rows);
  // The states and caches below, checked against the memory there is before any is allocated.
  const ReferenceMemory need = reference_memory(cfg_, num_slots, max_context, 0);
  check_host_memory(need.states(), fmt::format("the CPU reference model of '{}'", printable(cfg_.name)),
                    fmt::format("conv state {}, SSM state {}, KV cache {} for {} slot(s) of {} tokens",
                                format_host_bytes(need.conv_state), format_host_bytes(need.ssm_state),
                                format_host_bytes(need.kv_cache), num_slots, max_context));
  if (opt_.act == Store::bf16) {
    for (auto& [name, t] : weights_) {
      for (auto& x : t.data) x = round_bf16(x);
    }
  }
  const int64_t C = g.C();
  for (int i = 0; i < cfg_.layers; ++i) {
    const bool attn = layer_is_attention(cfg_, i);
    is_attention_.push_back(attn);
    if (attn) {
      state_index_.push_back(static_cast<int>(kv_.size()));
      kv_.emplace_back();
      kv_.back().reserve(num_slots);
      for (int s = 0; s < num_slots; ++s) kv_.back().emplace_back(cfg_.Hkv, cfg_.D, max_context);
    } else {
      state_index_.push_back(static_cast<int>(gdn_.size()));
      GdnState st;
      st.conv.assign(static_cast<size_t>(num_slots) * C * (g.K - 1), 0.f);
      st.ssm.assign(static_cast<size_t>(num_slots) * g.Hv * g.Dk * g.Dv, 0.f);
      gdn_.push_back(std::move(st));
    }
  }
  len_.assign(num_slots, 0);
}

const float* ReferenceModel::w(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) fail("internal: missing weight " + name);
  return it->second.data.data();
}

const float* ReferenceModel::wl(int layer, const std::string& suffix) const { return w(layer_name(layer, suffix)); }

void ReferenceModel::check_slot(int slot, const char* what) const {
  if (slot < 0 || slot >= num_slots_) {
    fail(fmt::format("{}: slot {} is outside [0, {})", what, slot, num_slots_));
  }
}

void ReferenceModel::check_token(int64_t token, const char* what) const {
  if (token < 0 || token >= cfg_.vocab) {
    fail(fmt::format("{}: token id {} is outside the vocabulary [0, {})", what, token, cfg_.vocab));
  }
}

int64_t ReferenceModel::length(int slot) const {
  check_slot(slot, "length");
  return len_[slot];
}

void ReferenceModel::reset(int slot) {
  check_slot(slot, "reset");
  const GdnDims& g = cfg_.gdn;
  const size_t conv_row = static_cast<size_t>(g.C()) * (g.K - 1);
  const size_t ssm_row = static_cast<size_t>(g.Hv) * g.Dk * g.Dv;
  for (auto& st : gdn_) {
    std::fill(st.conv.begin() + slot * conv_row, st.conv.begin() + (slot + 1) * conv_row, 0.f);
    std::fill(st.ssm.begin() + slot * ssm_row, st.ssm.begin() + (slot + 1) * ssm_row, 0.f);
  }
  for (auto& layer : kv_) {
    ref::KvCache& kv = layer[slot];
    std::fill(kv.k.begin(), kv.k.end(), 0.f);
    std::fill(kv.v.begin(), kv.v.end(), 0.f);
    kv.len = 0;
  }
  len_[slot] = 0;
}

ReferenceModel::Packed ReferenceModel::pack_prefill(const std::vector<Sequence>& batch) const {
  if (batch.empty()) fail("prefill: the batch is empty");
  std::vector<char> used(num_slots_, 0);
  int64_t total = 0;
  for (size_t n = 0; n < batch.size(); ++n) {
    const Sequence& s = batch[n];
    check_slot(s.slot, "prefill");
    if (used[s.slot]) fail(fmt::format("prefill: slot {} appears twice in the batch", s.slot));
    used[s.slot] = 1;
    if (s.tokens.empty()) fail(fmt::format("prefill: sequence {} (slot {}) has no tokens", n, s.slot));
    for (int64_t t : s.tokens) check_token(t, "prefill");
    const int64_t n_tok = static_cast<int64_t>(s.tokens.size());
    if (len_[s.slot] + n_tok > max_context_) {
      fail(fmt::format("prefill: context overflow on slot {}: {} cached + {} new tokens > max_context {}", s.slot,
                       len_[s.slot], n_tok, max_context_));
    }
    total += n_tok;
  }
  if (total > INT32_MAX) fail(fmt::format("prefill: {} tokens in one batch exceed 2^31-1", total));
  Packed p;
  p.N = static_cast<int>(batch.size());
  p.T = total;
  p.cu.push_back(0);
  for (const Sequence& s : batch) {
    p.slots.push_back(s.slot);
    p.has_history.push_back(len_[s.slot] > 0 ? 1 : 0);
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      p.tokens.push_back(s.tokens[t]);
      p.positions.push_back(len_[s.slot] + static_cast<int64_t>(t));
    }
    p.cu.push_back(static_cast<int32_t>(p.tokens.size()));
  }
  return p;
}

std::vector<float> ReferenceModel::prefill(const std::vector<Sequence>& batch) {
  return forward(pack_prefill(batch), /*decode_step=*/false, /*all_logits=*/false);
}

std::vector<float> ReferenceModel::prefill_all_logits(const std::vector<Sequence>& batch) {
  return forward(pack_prefill(batch), /*decode_step=*/false, /*all_logits=*/true);
}

std::vector<float> ReferenceModel::decode(const std::vector<int>& slots, const std::vector<int64_t>& tokens) {
  if (slots.empty()) fail("decode: the batch is empty");
  if (slots.size() != tokens.size()) {
    fail(fmt::format("decode: {} slots but {} tokens", slots.size(), tokens.size()));
  }
  std::vector<char> used(num_slots_, 0);
  for (size_t b = 0; b < slots.size(); ++b) {
    check_slot(slots[b], "decode");
    if (used[slots[b]]) fail(fmt::format("decode: slot {} appears twice in the batch", slots[b]));
    used[slots[b]] = 1;
    check_token(tokens[b], "decode");
    if (len_[slots[b]] + 1 > max_context_) {
      fail(fmt::format("decode: context overflow on slot {}: {} cached + 1 new token > max_context {}", slots[b],
                       len_[slots[b]], max_context_));
    }
  }
  Packed p;
  p.N = static_cast<int>(slots.size());
  p.T = p.N;
  p.tokens = tokens;
  p.cu.push_back(0);
  for (int b = 0; b < p.N; ++b) {
    p.slots.push_back(slots[b]);
    p.has_history.push_back(len_[slots[b]] > 0 ? 1 : 0);
    p.positions.push_back(len_[slots[b]]);
    p.cu.push_back(b + 1);
  }
  return forward(p, /*decode_step=*/true, /*all_logits=*/false);
}

std::vector<int64_t> ReferenceModel::generate(const std::vector<int64_t>& prompt, int max_new, int slot) {
  check_slot(slot, "generate");
  if (opt_.head_rows > 0) fail("generate: needs the whole LM head (this model holds head_rows of it)");
  if (prompt.empty()) fail("generate: the prompt is empty");
  if (max_new < 0) fail(fmt::format("generate: max_new ({}) must be >= 0", max_new));
  for (int64_t t : prompt) check_token(t, "generate");
  const int64_t need = static_cast<int64_t>(prompt.size()) + std::max(max_new - 1, 0);
  if (need > max_context_) {
    fail(
        fmt::format("generate: context overflow: a {}-token prompt and {} new tokens need {} positions "
                    "> max_context {}",
                    prompt.size(), max_new, need, max_context_));
  }
  std::vector<int64_t> out;
  if (max_new == 0) return out;
  reset(slot);
  std::vector<float> logits = prefill({Sequence{slot, prompt}});
  const int64_t V = cfg_.vocab;
  for (int i = 0; i < max_new; ++i) {
    const int64_t next = ref::argmax(logits.data(), V);
    out.push_back(next);
    if (i + 1 < max_new) logits = decode({slot}, {next});
  }
  return out;
}

std::vector<float> ReferenceModel::forward(const Packed& p, bool decode_step, bool all_logits) {
  const Store act = opt_.act;
  const int H = cfg_.hidden, I = cfg_.intermediate;
  const int64_t V = cfg_.vocab, T = p.T;
  const float eps = cfg_.rms_eps;

  std::vector<float> x(static_cast<size_t>(T) * H), h(x.size()), mix(x.size());
  const auto reduce = [&](std::vector<float>& v) {  // a tensor-parallel rank's sum over the ranks
    if (!opt_.all_reduce) return;
    opt_.all_reduce(v);
    if (v.size() != x.size()) fail(fmt::format("all_reduce changed the size from {} to {}", x.size(), v.size()));
  };
  ref::embedding(w("model.embed_tokens.weight"), p.tokens.data(), x.data(), T, V, H);
  for (auto& v : x) v = ref::store(v, act);

  for (int i = 0; i < cfg_.layers; ++i) {
    ref::rmsnorm(x.data(), wl(i, "input_layernorm.weight"), h.data(), T, H, eps, act);
    if (is_attention_[i]) {
      attention_layer(i, p, decode_step, h.data(), mix.data());
    } else {
      gdn_layer(i, p, decode_step, h.data(), mix.data());
    }
    reduce(mix);
    for (size_t j = 0; j < x.size(); ++j) x[j] = ref::store(x[j] + mix[j], act);
    ref::rmsnorm(x.data(), wl(i, "post_attention_layernorm.weight"), h.data(), T, H, eps, act);
    ref::swiglu_mlp(h.data(), wl(i, "mlp.gate_proj.weight"), wl(i, "mlp.up_proj.weight"), wl(i, "mlp.down_proj.weight"),
                    mix.data(), T, H, I, act, act);
    reduce(mix);
    for (size_t j = 0; j < x.size(); ++j) x[j] = ref::store(x[j] + mix[j], act);
    if (opt_.on_layer && !opt_.on_layer(i + 1, cfg_.layers)) {
      throw ReferenceInterrupted(fmt::format("the forward was stopped after layer {} of {}", i + 1, cfg_.layers));
    }
  }
  for (int n = 0; n < p.N; ++n) len_[p.slots[n]] += p.cu[n + 1] - p.cu[n];

  // Final norm and lm_head on the rows whose logits are wanted.
  std::vector<int64_t> rows;
  if (all_logits) {
    for (int64_t t = 0; t < T; ++t) rows.push_back(t);
  } else {
    for (int n = 0; n < p.N; ++n) rows.push_back(p.cu[n + 1] - 1);
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> xr(static_cast<size_t>(R) * H);
  for (int64_t r = 0; r < R; ++r) {
    std::copy(x.begin() + rows[r] * H, x.begin() + (rows[r] + 1) * H, xr.begin() + r * H);
  }
  ref::rmsnorm(xr.data(), w("model.norm.weight"), xr.data(), R, H, eps, act);
  const int64_t Vh = opt_.head_rows > 0 ? opt_.head_rows : V;  // a tensor-parallel rank's share
  const float* head =
      tied_embeddings(cfg_) && opt_.head_rows == 0 ? w("model.embed_tokens.weight") : w("lm_head.weight");
  std::vector<float> logits(static_cast<size_t>(R) * Vh);
  ref::linear(xr.data(), head, logits.data(), R, H, static_cast<int>(Vh), Store::f32);
  return logits;
}

void ReferenceModel::gdn_layer(int layer, const Packed& p, bool decode_step, const float* h, float* out) {
  const Store act = opt_.act;
  const GdnDims& g = cfg_.gdn;
  const int H = cfg_.hidden, C = g.C(), Hv = g.Hv, Dv = g.Dv;
  const int64_t T = p.T;
  GdnState& st = gdn_[state_index_[layer]];

  std::vector<float> mixed(static_cast<size_t>(T) * C), z(static_cast<size_t>(T) * Hv * Dv);
  std::vector<float> b(static_cast<size_t>(T) * Hv), a(b.size());
  ref::linear(h, wl(layer, "linear_attn.in_proj_qkv.weight"), mixed.data(), T, H, C, act);
  ref::linear(h, wl(layer, "linear_attn.in_proj_z.weight"), z.data(), T, H, Hv * Dv, act);
  ref::linear(h, wl(layer, "linear_attn.in_proj_b.weight"), b.data(), T, H, Hv, act);
  ref::linear(h, wl(layer, "linear_attn.in_proj_a.weight"), a.data(), T, H, Hv, act);

  // Causal conv (SiLU, no bias); conv1d.weight [C, 1, K] is [C, K] in memory.
  const ref::ConvShape cs{C, g.K, /*silu=*/true, /*out=*/act, /*state=*/act};
  std::vector<float> conv(static_cast<size_t>(T) * C);
  const float* conv_w = wl(layer, "linear_attn.conv1d.weight");
  if (decode_step) {
    ref::conv_update(cs, p.N, mixed.data(), C, p.slots.data(), st.conv.data(), conv_w, nullptr, conv.data());
  } else {
    ref::conv_fwd(cs, p.N, p.cu.data(), mixed.data(), C, p.slots.data(), p.has_history.data(), st.conv.data(), conv_w,
                  nullptr, conv.data());
  }

  // Post-conv: split q | k | v, L2-normalise q and k, gates g and beta.
  const ref::PostconvShape ps{g.Hk, g.Hv, g.Dk, g.Dv, act};
  std::vector<float> q(static_cast<size_t>(T) * g.Hk * g.Dk), k(q.size());
  std::vector<float> v(static_cast<size_t>(T) * Hv * Dv), gg(static_cast<size_t>(T) * Hv), beta(gg.size());
  ref::postconv(ps, static_cast<int>(T), conv.data(), C, a.data(), Hv, b.data(), Hv, wl(layer, "linear_attn.A_log"),
                wl(layer, "linear_attn.dt_bias"), q.data(), k.data(), v.data(), gg.data(), beta.data());

  // Gated delta rule.
  const ref::DeltaShape ds{g.Hk, g.Hv, g.Dk, g.Dv, act, opt_.ssm_state};
  std::vector<float> o(v.size());
  if (decode_step) {
    ref::delta_rule_decode(ds, p.N, q.data(), k.data(), v.data(), gg.data(), beta.data(), p.slots.data(), st.ssm.data(),
                           o.data());
  } else if (opt_.chunked_prefill) {
    ref::delta_rule_prefill_chunked(ds, p.N, p.cu.data(), q.data(), k.data(), v.data(), gg.data(), beta.data(),
                                    p.slots.data(), p.has_history.data(), st.ssm.data(), o.data(), opt_.chunk);
  } else {
    ref::delta_rule_prefill_recurrent(ds, p.N, p.cu.data(), q.data(), k.data(), v.data(), gg.data(), beta.data(),
                                      p.slots.data(), p.has_history.data(), st.ssm.data(), o.data());
  }

  // Gated RMSNorm per (token, v-head) with silu(z), then out_proj.
  ref::gated_rmsnorm(o.data(), z.data(), wl(layer, "linear_attn.norm.weight"), o.data(), T * Hv, Dv, cfg_.rms_eps, act);
  ref::linear(o.data(), wl(layer, "linear_attn.out_proj.weight"), out, T, Hv * Dv, H, act);
}

void ReferenceModel::attention_layer(int layer, const Packed& p, bool decode_step, const float* h, float* out) {
  const Store act = opt_.act;
  const int H = cfg_.hidden, Hq = cfg_.Hq, Hkv = cfg_.Hkv, D = cfg_.D;
  const int64_t T = p.T;
  std::vector<ref::KvCache>& caches = kv_[state_index_[layer]];

  std::vector<float> qg(static_cast<size_t>(T) * Hq * 2 * D);
  std::vector<float> q(static_cast<size_t>(T) * Hq * D), gate(q.size());
  std::vector<float> k(static_cast<size_t>(T) * Hkv * D), v(k.size());
  ref::linear(h, wl(layer, "self_attn.q_proj.weight"), qg.data(), T, H, 2 * Hq * D, act);
  ref::split_q_gate(qg.data(), q.data(), gate.data(), T, Hq, D);
  ref::linear(h, wl(layer, "self_attn.k_proj.weight"), k.data(), T, H, Hkv * D, act);
  ref::linear(h, wl(layer, "self_attn.v_proj.weight"), v.data(), T, H, Hkv * D, act);
  ref::rmsnorm(q.data(), wl(layer, "self_attn.q_norm.weight"), q.data(), T * Hq, D, cfg_.rms_eps, act);
  ref::rmsnorm(k.data(), wl(layer, "self_attn.k_norm.weight"), k.data(), T * Hkv, D, cfg_.rms_eps, act);
  if (rotary_ > 0) {
    ref::rope(q.data(), p.positions.data(), T, Hq, D, rotary_, cfg_.rope_theta, act);
    ref::rope(k.data(), p.positions.data(), T, Hkv, D, rotary_, cfg_.rope_theta, act);
  }

  std::vector<float> attn(q.size());
  std::vector<ref::KvView> views(p.N);
  for (int n = 0; n < p.N; ++n) views[n] = caches[p.slots[n]].view();
  if (decode_step) {
    ref::attention_decode(q.data(), k.data(), v.data(), gate.data(), views.data(), attn.data(), p.N, Hq, Hkv, D, act);
  } else {
    ref::attention_prefill(q.data(), k.data(), v.data(), gate.data(), p.cu.data(), views.data(), attn.data(), T, p.N,
                           Hq, Hkv, D, act);
  }
  const int64_t row = static_cast<int64_t>(Hkv) * D;
  for (int n = 0; n < p.N; ++n) {
    const int64_t len = p.cu[n + 1] - p.cu[n];
    caches[p.slots[n]].append(k.data() + p.cu[n] * row, v.data() + p.cu[n] * row, len);
  }
  ref::linear(attn.data(), wl(layer, "self_attn.o_proj.weight"), out, T, Hq * D, H, act);
}

}  // namespace sg
