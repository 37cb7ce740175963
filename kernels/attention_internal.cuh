// attention_internal.cuh: private to kernels/attention.cu and kernels/attention_generic.cu: the
// device helpers both kernel families share (row resolution, the output gate, the scale), the
// split-K merge launcher (defined in attention.cu, used by both decodes) and the generic pair's
// launchers (defined in attention_generic.cu). The launchers only launch: the public entry points
// in attention.cu validate the params first and return cudaGetLastError() after.
#pragma once
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/attention.h"

namespace sg::attn_detail {

constexpr float kNegInf = -INFINITY;

// True when row t is live; then slot and pos are its cache coordinates (the rule of attn_prep.h:
// t < *num_tokens when set, token_seq >= 0, slots[seq] >= 0, 0 <= pos < max_context).
__device__ __forceinline__ bool resolve_row(const AttnTokenMeta& m, int t, int max_context, int& slot, int& pos) {
  if (m.num_tokens && t >= *m.num_tokens) return false;
  const int s = m.token_seq[t];
  if (s < 0) return false;
  slot = m.slots[s];
  if (slot < 0) return false;
  pos = m.positions[t];
  return pos >= 0 && pos < max_context;
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// D^-0.5 as float(pow(double(D), -0.5)).
inline float attention_scale(int D) { return static_cast<float>(std::pow(static_cast<double>(D), -0.5)); }

// Merges the split-K partials of a decode (workspace layout: attention_decode_workspace_bytes)
// into out = (o / l) * sigmoid(gate); padding rows get zeros. Grid (Hq, T), block D threads.
void launch_decode_merge(const AttentionParams& p, cudaStream_t stream);

// The generic pair (any D in 1..kAttentionMaxD): decode with p.splits splits (then the merge when
// splits > 1), prefill as one split over every row.
void launch_generic_decode(const AttentionParams& p, cudaStream_t stream);
void launch_generic_prefill(const AttentionParams& p, cudaStream_t stream);

}  // namespace sg::attn_detail
