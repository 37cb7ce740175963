// attention_ref.h: CPU reference for the gated full-attention core (after q_norm/k_norm and RoPE,
// before o_proj): causal softmax attention with GQA, scale D^-0.5, output * sigmoid(gate).
//   split_q_gate       q_proj output -> query and gate (per head D query rows then D gate rows)
//   KvCache            the reference KV cache of one sequence for one layer (layout below)
//   attention_prefill  varlen prefill over a packed token stream (cu_seqlens), optional history
//   attention_decode   one query token per sequence: its cached keys plus its own key
// KV cache layout (reference only): per sequence, K and V are each a contiguous [ctx, Hkv, D]
// row-major array; key of position p, kv head g, feature d at k[(p * Hkv + g) * D + d].
// The attention functions only read caches; appending the new tokens' K/V is a separate step
// (KvCache::append), done by the caller after (or before, for the next step) the attention call.
// Numeric choices, per (token, q head h), kv head g = h / (Hq / Hkv), keys in position order:
//   scale    = float(pow(double(D), -0.5))                    (Python's head_dim**-0.5 as f32)
//   s_j      = (sum_d q[d] * k_j[d]) * scale                  sequential f32 sum over d
//   m        = max_j s_j;  e_j = std::exp(s_j - m);  Z = sum_j e_j (sequential f32, j ascending)
//   p_j      = e_j / Z;    o[d] = sum_j p_j * v_j[d]          sequential f32, j ascending
//   out[d]   = o[d] * sigmoid(gate[d]),  sigmoid(x) = 1.0f / (1.0f + std::exp(-x)),  rounded once
//              with `out`.
// Subtracting the max makes large logits safe (no inf/NaN while the logits are finite).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/ref/ref_common.h"

namespace sg::ref {

// A read-only view of one sequence's cached keys and values.
struct KvView {
  const float* k = nullptr;  // [len, Hkv, D] row-major
  const float* v = nullptr;  // [len, Hkv, D] row-major
  int64_t len = 0;           // cached positions 0..len-1; < 0 marks a padding row (see below)
};

// An owning per-sequence cache with room for `capacity` positions.
struct KvCache {
  int Hkv = 0;
  int D = 0;
  int64_t capacity = 0;
  int64_t len = 0;
  std::vector<float> k;  // [capacity, Hkv, D] row-major; positions >= len are unused (zeros)
  std::vector<float> v;  // [capacity, Hkv, D] row-major

  KvCache(int Hkv, int D, int64_t capacity);
  // Writes n tokens' keys and values at positions len..len+n-1 and advances len.
  void append(const float* k_new,  // [n, Hkv, D] row-major
              const float* v_new,  // [n, Hkv, D] row-major
              int64_t n);
  KvView view() const { return {k.data(), v.data(), len}; }
};

// Splits q_proj's output into query and gate: row t, head h of `qg` holds D query features then
// D gate features.
void split_q_gate(const float* qg,  // [T, Hq, 2 * D] row-major
                  float* q,         // [T, Hq, D] row-major
                  float* gate,      // [T, Hq, D] row-major
                  int64_t T, int Hq, int D);

// Varlen causal prefill. Sequence s owns tokens cu_seqlens[s] .. cu_seqlens[s+1]-1 of the packed
// stream. Token t of sequence s (0-based inside the sequence) sits at absolute position
// hist_s + t, where hist_s = history[s].len (0 when history is null), and attends to the cached
// positions 0..hist_s-1 (history[s].k/v) followed by the sequence's new tokens 0..t (k/v below).
// A sequence whose history[s].len < 0 is a padding sequence: nothing is read, its output rows
// are zeros.
void attention_prefill(const float* q,             // [T, Hq, D] row-major (after norm + RoPE)
                       const float* k,             // [T, Hkv, D] row-major (after norm + RoPE)
                       const float* v,             // [T, Hkv, D] row-major
                       const float* gate,          // [T, Hq, D] row-major
                       const int32_t* cu_seqlens,  // [S + 1]: 0, non-decreasing, ends at T
                       const KvView* history,      // [S] or nullptr (no history anywhere)
                       float* out,                 // [T, Hq, D] row-major; must not alias inputs
                       int64_t T, int S, int Hq, int Hkv, int D, Store store_out = Store::f32);

// Decode: row b is one new token of its own sequence at absolute position cache[b].len. It
// attends to cache[b]'s positions 0..len-1 followed by its own key/value (k[b], v[b]); the cache
// is not written. cache[b].len < 0 marks a padding row: nothing is read, out row b is zeros.
void attention_decode(const float* q,       // [B, Hq, D] row-major
                      const float* k,       // [B, Hkv, D] row-major, the new tokens' keys
                      const float* v,       // [B, Hkv, D] row-major, the new tokens' values
                      const float* gate,    // [B, Hq, D] row-major
                      const KvView* cache,  // [B]
                      float* out,           // [B, Hq, D] row-major; must not alias inputs
                      int64_t B, int Hq, int Hkv, int D, Store store_out = Store::f32);

}  // namespace sg::ref
