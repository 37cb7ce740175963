// attention_ref.cpp: causal GQA softmax attention with an output gate, plain f32 loops
// (prefill over a packed varlen stream with optional history, and decode). See attention_ref.h.
#include "kernels/ref/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace sg::ref {
namespace {

void check_heads(const char* op, int Hq, int Hkv, int D) {
  if (Hq <= 0 || Hkv <= 0 || D <= 0) {
    throw std::invalid_argument(fmt::format("{}: Hq ({}), Hkv ({}) and D ({}) must be > 0", op, Hq, Hkv, D));
  }
  if (Hq % Hkv != 0) {
    throw std::invalid_argument(fmt::format("{}: Hq ({}) must be a multiple of Hkv ({})", op, Hq, Hkv));
  }
}

void check_view(const char* op, const KvView& c, int64_t index) {
  if (c.len > 0 && (!c.k || !c.v)) {
    throw std::invalid_argument(fmt::format("{}: cache {} has len {} but a null k or v pointer", op, index, c.len));
  }
}

// The keys (and values) one query attends to, in position order: pointers to D features each.
struct KeyList {
  std::vector<const float*> k;
  std::vector<const float*> v;
};

// Appends cached positions 0..len-1 of kv head g.
void add_cached(KeyList& list, const KvView& c, int g, int Hkv, int D) {
  for (int64_t p = 0; p < c.len; ++p) {
    list.k.push_back(c.k + (p * Hkv + g) * D);
    list.v.push_back(c.v + (p * Hkv + g) * D);
  }
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// One query head over its key list: softmax(q . k_j * scale) weighted sum of v_j, times
// sigmoid(gate), rounded once. Arithmetic exactly as documented in attention_ref.h.
void attend_row(const float* q, const float* gate, const KeyList& keys, int D, float scale, float* out,
                Store store_out) {
  const size_t n = keys.k.size();
  std::vector<float> s(n);
  for (size_t j = 0; j < n; ++j) {
    float dot = 0.f;
    for (int d = 0; d < D; ++d) dot += q[d] * keys.k[j][d];
    s[j] = dot * scale;
  }
  float m = s[0];
  for (size_t j = 1; j < n; ++j) m = std::max(m, s[j]);
  float z = 0.f;
  for (size_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - m);
    z += s[j];
  }
  for (size_t j = 0; j < n; ++j) s[j] = s[j] / z;
  for (int d = 0; d < D; ++d) {
    float o = 0.f;
    for (size_t j = 0; j < n; ++j) o += s[j] * keys.v[j][d];
    out[d] = store(o * sigmoid(gate[d]), store_out);
  }
}

float attention_scale(int D) { return static_cast<float>(std::pow(static_cast<double>(D), -0.5)); }

}  // namespace

KvCache::KvCache(int Hkv_, int D_, int64_t capacity_) : Hkv(Hkv_), D(D_), capacity(capacity_) {
  if (Hkv <= 0 || D <= 0 || capacity < 0) {
    throw std::invalid_argument(
        fmt::format("KvCache: Hkv ({}) and D ({}) must be > 0, capacity ({}) >= 0", Hkv, D, capacity));
  }
  k.assign(static_cast<size_t>(capacity) * Hkv * D, 0.f);
  v.assign(static_cast<size_t>(capacity) * Hkv * D, 0.f);
}

void KvCache::append(const float* k_new, const float* v_new, int64_t n) {
  if (n <= 0) throw std::invalid_argument(fmt::format("KvCache::append: n ({}) must be > 0", n));
  if (len + n > capacity) {
    throw std::invalid_argument(
        fmt::format("KvCache::append: {} cached + {} new positions exceed capacity {}", len, n, capacity));
  }
  if (!k_new || !v_new) throw std::invalid_argument("KvCache::append: null k or v");
  const int64_t row = static_cast<int64_t>(Hkv) * D;
  std::copy(k_new, k_new + n * row, k.begin() + len * row);
  std::copy(v_new, v_new + n * row, v.begin() + len * row);
  len += n;
}

void split_q_gate(const float* qg, float* q, float* gate, int64_t T, int Hq, int D) {
  if (T <= 0 || Hq <= 0 || D <= 0) {
    throw std::invalid_argument(fmt::format("split_q_gate: T ({}), Hq ({}) and D ({}) must be > 0", T, Hq, D));
  }
  if (!qg || !q || !gate) throw std::invalid_argument("split_q_gate: null pointer argument");
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < Hq; ++h) {
      const float* src = qg + (t * Hq + h) * 2 * D;
      float* qd = q + (t * Hq + h) * D;
      float* gd = gate + (t * Hq + h) * D;
      for (int d = 0; d < D; ++d) {
        qd[d] = src[d];
        gd[d] = src[D + d];
      }
    }
  }
}

void attention_prefill(const float* q, const float* k, const float* v, const float* gate, const int32_t* cu_seqlens,
                       const KvView* history, float* out, int64_t T, int S, int Hq, int Hkv, int D, Store store_out) {
  check_heads("attention_prefill", Hq, Hkv, D);
  if (T <= 0 || S <= 0) {
    throw std::invalid_argument(fmt::format("attention_prefill: T ({}) and S ({}) must be > 0", T, S));
  }
  if (!q || !k || !v || !gate || !cu_seqlens || !out) {
    throw std::invalid_argument("attention_prefill: null pointer argument");
  }
  detail::require_cu_seqlens(cu_seqlens, S, "attention_prefill");
  detail::require(cu_seqlens[S] == T, "attention_prefill",
                  fmt::format("cu_seqlens[S] ({}) must equal T ({})", cu_seqlens[S], T));
  for (int s = 0; s < S; ++s) {
    if (history) check_view("attention_prefill", history[s], s);
  }

  const int group = Hq / Hkv;
  const float scale = attention_scale(D);
  for (int s = 0; s < S; ++s) {
    const int64_t begin = cu_seqlens[s];
    const int64_t end = cu_seqlens[s + 1];
    const KvView hist = history ? history[s] : KvView{};
    if (hist.len < 0) {  // padding sequence
      std::fill(out + begin * Hq * D, out + end * Hq * D, 0.f);
      continue;
    }
    for (int64_t t = begin; t < end; ++t) {
      for (int h = 0; h < Hq; ++h) {
        const int g = h / group;
        KeyList keys;
        add_cached(keys, hist, g, Hkv, D);
        for (int64_t u = begin; u <= t; ++u) {  // causal: new tokens up to and including t
          keys.k.push_back(k + (u * Hkv + g) * D);
          keys.v.push_back(v + (u * Hkv + g) * D);
        }
        const int64_t row = (t * Hq + h) * D;
        attend_row(q + row, gate + row, keys, D, scale, out + row, store_out);
      }
    }
  }
}

void attention_decode(const float* q, const float* k, const float* v, const float* gate, const KvView* cache,
                      float* out, int64_t B, int Hq, int Hkv, int D, Store store_out) {
  check_heads("attention_decode", Hq, Hkv, D);
  if (B <= 0) throw std::invalid_argument(fmt::format("attention_decode: B ({}) must be > 0", B));
  if (!q || !k || !v || !gate || !cache || !out) {
    throw std::invalid_argument("attention_decode: null pointer argument");
  }
  for (int64_t b = 0; b < B; ++b) check_view("attention_decode", cache[b], b);

  const int group = Hq / Hkv;
  const float scale = attention_scale(D);
  for (int64_t b = 0; b < B; ++b) {
    if (cache[b].len < 0) {  // padding row
      std::fill(out + b * Hq * D, out + (b + 1) * Hq * D, 0.f);
      continue;
    }
    for (int h = 0; h < Hq; ++h) {
      const int g = h / group;
      KeyList keys;
      add_cached(keys, cache[b], g, Hkv, D);
      keys.k.push_back(k + (b * Hkv + g) * D);
      keys.v.push_back(v + (b * Hkv + g) * D);
      const int64_t row = (b * Hq + h) * D;
      attend_row(q + row, gate + row, keys, D, scale, out + row, store_out);
    }
  }
}

}  // namespace sg::ref
