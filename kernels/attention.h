// attention.h: the full-attention core over a slot-indexed KV cache (after attn_prep appended the
// new tokens' keys/values): causal softmax attention with GQA (q head h reads kv head
// h / (Hq / Hkv)), scale D^-0.5 (float(pow(double(D), -0.5))), f32 accumulation with an online
// softmax, output o * sigmoid(gate) rounded once (sigmoid(x) = 1 / (1 + expf(-x))).
// Token t (metadata as in attn_prep.h) attends to its slot's cached positions 0..positions[t]
// (its own key included, written by attn_prep). Padding rows write zeros and read no cache.
// Sequences are isolated in prefill too, non-finite cache values included: a query tile may hold
// rows of several sequences, and each pass over one sequence's keys leaves the other rows' results
// as they are (within one sequence a NaN in a later position's V may still reach earlier rows of
// the same tile, through 0 * NaN).
// Two kernel families (attention_shapes.h says which D runs which):
// - tuned, D in {32, 64, 128, 256} (attention.cu):
//   attention_decode   one row per sequence (B = T rows); blocks per (kv head, row, split), the
//                      query heads of one kv head share the K/V reads; split-K (flash-decoding)
//                      over the context when splits > 1, merged by a second kernel.
//   attention_prefill  packed varlen tokens (with history); one block per (query tile, q head),
//                      K/V tiles of 32 positions (16 for an f32 cache with D = 256) staged in
//                      static shared memory (<= 48 KB, no opt-in attribute, nothing to set
//                      before graph capture); works for any token order (a tile holding several
//                      sequences is processed per sequence).
//   attention_prefill_mma (attention_prefill_mma.h): the same contract on the tensor cores for a
//                      bf16 cache and bf16 q, D in {32, 64, 128, 256}; not byte-equal to
//                      attention_prefill (within the bf16 output tolerance).
// - generic, any other D in 1..256 (attention_generic.cu; correct, not tuned): one block per
//   (row, q head, split), a warp per key (lanes over the features, an xor-tree dot product), no
//   K/V sharing between the query heads of a group. attention_decode honours splits exactly as
//   the tuned kernel does (split-K partials in the same workspace layout, then the same merge
//   kernel: two launches when splits > 1); attention_prefill is the same kernel with one split
//   over every token row (each row reads its whole context: quadratic reads, fine for the small
//   models that have these head sizes).
// Both are also correct for any row layout (decode on prefill rows gives the same values up to
// summation order), and read the live counts only from device memory.
// Both read the cache as it is stored and do the same f32 arithmetic on the values: an f32 cache
// (the parity mode) gives attention over unrounded k/v, a bf16 cache over k/v rounded once.
// Supported: D in 1..256 (attention_supports), cache bf16 or f32 (k_cache and v_cache 16-byte
// aligned, for every D: one contract), q/gate/out bf16 or f32, Hq % Hkv == 0.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/attention_shapes.h"
#include "kernels/attn_prep.h"
#include "kernels/numeric.h"

namespace sg {

struct AttentionParams {
  const void* q = nullptr;     // [T, Hq, D] (normed + rotated)
  const void* gate = nullptr;  // [T, Hq, D]
  DType q_dtype = DType::bf16;
  const void* k_cache = nullptr;  // [num_slots, max_context, Hkv, D] bf16 or f32, 16-byte aligned
  const void* v_cache = nullptr;  // [num_slots, max_context, Hkv, D] same dtype, 16-byte aligned
  DType cache_dtype = DType::bf16;
  AttnTokenMeta meta;
  void* out = nullptr;  // [T, Hq, D]
  DType out_dtype = DType::bf16;
  int T = 0;  // rows (token bucket / decode batch bucket)
  int Hq = 0, Hkv = 0, D = 0, max_context = 0;
  // Decode only: context splits (1 = no split-K) and the f32 workspace for splits > 1
  // (attention_decode_workspace_bytes).
  int splits = 1;
  float* workspace = nullptr;
};

// attention_supports, attention_tuned_head_dim and attention_decode_workspace_bytes: attention_shapes.h.

// attention_decode_pick_splits (the split count of a decode bucket): attention_shapes.h.

cudaError_t attention_decode(const AttentionParams& p, cudaStream_t stream);
cudaError_t attention_prefill(const AttentionParams& p, cudaStream_t stream);

}  // namespace sg
