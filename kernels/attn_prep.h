// attn_prep.h: the full-attention layer's pre-attention step, per token t (docs/MODEL.md,
// "Attention layer, per token"), one launch over a token bucket:
//   q[t,h]    = rope(rmsnorm(qg[t,h,0:D], q_norm), pos_t)       (zero-centred RMSNorm over D)
//   gate[t,h] = qg[t,h,D:2D]
//   k_cache[slot, pos_t, g] = rope(rmsnorm(k[t,g], k_norm), pos_t)
//   v_cache[slot, pos_t, g] = v[t,g]
// with slot = slots[token_seq[t]], pos_t = positions[t]. Arithmetic (f32, one rounding per stored
// value), matching kernels/ref/norm_ref.h and kernels/ref/rope_ref.h:
//   inv = 1 / sqrtf(sum(x^2) / D + eps)   (warp-tree sum, not sequential: tolerance-level diffs)
//   y   = (x * inv) * (1 + w)
//   inv_freq_i = 1.0f / float(pow(double(float(theta)), double(float(2i) / float(rotary))))
//   a_i = float(pos) * inv_freq_i;  cos/sin = float(cos/sin(double(a_i)))
//   rotate half on features 0..rotary-1, the rest pass through.
// KV cache: bf16 (k rounded once, v copied, rounded once when the input is f32) or f32 (k stored
// unrounded, the f32 value the arithmetic above produces; v copied exactly). Every dtype of the
// params is bf16 or f32.
// Padding: a row with token_seq < 0, slots[seq] < 0, pos outside [0, max_context) or
// t >= *num_tokens writes zeros to q and gate and nothing to the caches.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/numeric.h"

namespace sg {

// Per-token metadata of a packed token bucket, all in device memory (so one captured graph
// serves any live batch of its bucket).
struct AttnTokenMeta {
  const int32_t* positions = nullptr;   // [T] absolute position of the token in its sequence
  const int32_t* token_seq = nullptr;   // [T] sequence index into slots; < 0 = padding row
  const int32_t* slots = nullptr;       // [max_seqs] cache slot of each sequence; < 0 = padding
  const int32_t* num_tokens = nullptr;  // optional [1]: rows t >= *num_tokens are padding
};

struct AttnPrepParams {
  const void* qg = nullptr;  // [T, qg_stride]: per head D query features then D gate features
  int64_t qg_stride = 0;     // elements between token rows (0 = Hq * 2D)
  const void* k = nullptr;   // [T, k_stride] k_proj output, Hkv heads of D
  int64_t k_stride = 0;      // 0 = Hkv * D
  const void* v = nullptr;   // [T, v_stride] v_proj output
  int64_t v_stride = 0;      // 0 = Hkv * D
  DType in_dtype = DType::bf16;
  const void* q_norm = nullptr;  // [D] zero-centred weight (scale 1 + w)
  const void* k_norm = nullptr;  // [D]
  DType norm_dtype = DType::f32;
  void* q = nullptr;     // [T, Hq, D] out
  void* gate = nullptr;  // [T, Hq, D] out
  DType q_dtype = DType::bf16;
  void* k_cache = nullptr;          // [num_slots, max_context, Hkv, D] bf16 or f32
  void* v_cache = nullptr;          // [num_slots, max_context, Hkv, D] same dtype as k_cache
  DType cache_dtype = DType::bf16;  // bf16 or f32 (f32: the parity mode, no rounding of k/v)
  AttnTokenMeta meta;
  int T = 0;  // rows (the token bucket): with Hq + Hkv, the grid size
  int Hq = 0, Hkv = 0, D = 0, rotary_dim = 0, max_context = 0;
  float eps = 1e-6f;
  double rope_theta = 10000000.0;
  // Optional [max_context, rotary_dim] f32: row pos holds cos then sin of the rotary angles at
  // position pos, as rope_table_fill writes them (the same bytes the kernel computes without it).
  // With it each warp reads its row instead of evaluating pow, cos and sin in double precision.
  const float* rope_table = nullptr;
};

// Fills table [max_context, rotary_dim] (see AttnPrepParams::rope_table) for theta. Returns
// cudaErrorInvalidValue for a null table, max_context < 1 or an odd or negative rotary_dim.
cudaError_t rope_table_fill(float* table, int max_context, int rotary_dim, double theta, cudaStream_t stream);

// Grid ceil(T (Hq + Hkv) / 4) blocks of 4 warps, one warp per head job (token, q or k head);
// dynamic smem 4 (rotary + D) * 4 bytes (any cache dtype). With bf16 inputs, q, gate and cache, a
// rope_table, D <= 256 and D % 8 == 0, rotary_dim % 16 == 0 and 16-byte aligned rows, each lane
// moves 16 bytes at a time (the same bytes as the per-element kernel that runs otherwise). D <= 1024,
// rotary even, 0 <= rotary <= D; in, norm, q and cache dtypes bf16 or f32. Returns
// cudaErrorInvalidValue for bad params, else the launch error.
cudaError_t attn_prep(const AttnPrepParams& p, cudaStream_t stream);

}  // namespace sg
