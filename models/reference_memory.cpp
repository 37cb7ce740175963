// reference_memory.cpp: reference_memory() (see reference_memory.h).
#include "models/reference_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <limits>

#include "engine/host_memory.h"
#include "models/reference_model.h"

namespace sg {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

uint64_t mul(std::initializer_list<uint64_t> factors) {
  uint64_t r = 1;
  for (uint64_t f : factors) {
    if (__builtin_mul_overflow(r, f, &r)) return kMax;
  }
  return r;
}
uint64_t add(uint64_t a, uint64_t b) { return a > kMax - b ? kMax : a + b; }
uint64_t u(int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : 0; }

}  // namespace

uint64_t ReferenceMemory::states() const { return add(add(conv_state, ssm_state), kv_cache); }

uint64_t ReferenceMemory::total() const { return add(add(weights, states()), activations); }

std::string ReferenceMemory::describe() const {
  return fmt::format("weights {}, conv state {}, SSM state {}, KV cache {}, activations {}", format_host_bytes(weights),
                     format_host_bytes(conv_state), format_host_bytes(ssm_state), format_host_bytes(kv_cache),
                     format_host_bytes(activations));
}

uint64_t reference_weight_bytes(const Qwen35Config& c) {
  uint64_t bytes = 0;
  for (const auto& [name, shape] : expected_weights(c)) {
    uint64_t n = 4;
    for (int64_t d : shape) n = mul({n, u(d)});
    bytes = add(bytes, n);
  }
  return bytes;
}

ReferenceMemory reference_memory(const Qwen35Config& c, int64_t num_slots, int64_t max_context, int64_t max_tokens) {
  ReferenceMemory m;
  const GdnDims& g = c.gdn;
  const uint64_t gdn_layers = u(c.num_linear_attention()), attn_layers = u(c.num_full_attention());
  const uint64_t slots = u(num_slots), ctx = u(max_context), T = u(max_tokens);
  const uint64_t H = u(c.hidden), I = u(c.intermediate), V = u(c.vocab);
  const uint64_t Hq = u(c.Hq), Hkv = u(c.Hkv), D = u(c.D);
  const uint64_t Hk = u(g.Hk), Hv = u(g.Hv), Dk = u(g.Dk), Dv = u(g.Dv), K = u(g.K);
  const uint64_t C = add(mul({2, Hk, Dk}), mul({Hv, Dv}));
  m.weights = reference_weight_bytes(c);
  m.conv_state = mul({4, gdn_layers, slots, C, K > 0 ? K - 1 : 0});
  m.ssm_state = mul({4, gdn_layers, slots, Hv, Dk, Dv});
  m.kv_cache = mul({4, attn_layers, slots, 2, ctx, Hkv, D});
  // Per token, f32: the residual stream, the normed input and the mixer/MLP output (3 H), plus the
  // largest of one GDN mixer's buffers (projections, conv output, q/k/v, gates, delta-rule output),
  // one attention mixer's (q+gate, q, gate, k, v, output) and the MLP's (gate and up, I each).
  const uint64_t gdn = add(add(mul({2, C}), mul({3, Hv, Dv})), add(mul({4, Hv}), mul({2, Hk, Dk})));
  const uint64_t attn = add(mul({5, Hq, D}), mul({2, Hkv, D}));
  const uint64_t per_token = add(mul({3, H}), std::max({gdn, attn, mul({2, I})}));
  // Per forward: the logits and final-norm rows (at most T of them), one delta-rule head's state
  // in double (the chunked prefill) and one attention score row.
  const uint64_t per_forward = add(add(mul({4, T, add(V, H)}), mul({16, Dk, Dv})), mul({4, ctx}));
  m.activations = add(mul({4, T, per_token}), per_forward);
  return m;
}

}  // namespace sg
