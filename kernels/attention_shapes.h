// attention_shapes.h: the shape logic of the attention kernels (attention.h), CUDA-free so the CPU
// tests cover it: which head sizes have a tuned kernel pair, which shapes launch at all, and the
// size of the split-K decode workspace.
//   tuned   D in {32, 64, 128, 256}: attention.cu (decode: D / 8 lanes per key, 16-byte loads;
//           prefill: K/V tiles in shared memory).
//   generic any other D in 1..kAttentionMaxD: attention_generic.cu, one block per (row, q head,
//           split), a warp per key, lanes over the features; correct, not tuned (the test
//           fixtures' head sizes 16 and 24, other small models).
//   mma     prefill on the tensor cores (attention_prefill_mma.h): bf16 cache and q, D in
//           {32, 64, 128, 256}; dynamic shared memory attention_prefill_mma_smem(D); decode on
//           the tensor cores (attention_decode_mma.h): bf16 cache and q, D in {64, 128, 256},
//           at most 8 query heads per kv head; attention_decode_mma_smem(D).
//   wgmma   prefill on the sm_90a warpgroup tensor cores (attention_prefill_wgmma.h): bf16 cache
//           and q, D in {64, 128, 256}; attention_prefill_wgmma_smem(D).
#pragma once
#include <cstddef>

#include "kernels/numeric.h"

namespace sg {

inline constexpr int kAttentionMaxD = 256;
// Query heads a block of the tuned CUDA-core decode takes (a kv head's group in chunks of 8).
inline constexpr int kAttentionDecodeMaxGroup = 8;

// True for the head sizes with a tuned kernel pair: 32, 64, 128, 256.
constexpr bool attention_tuned_head_dim(int D) { return D == 32 || D == 64 || D == 128 || D == 256; }

// Shapes and cache dtypes both kernels take: Hq, Hkv >= 1, Hq % Hkv == 0, 1 <= D <= 256 (tuned or
// generic), cache bf16 or f32. Without a dtype: for the engine's bf16 cache.
bool attention_supports(int Hq, int Hkv, int D, DType cache_dtype);
bool attention_supports(int Hq, int Hkv, int D);

// f32 workspace of a split-K decode (both kernel families): [T, Hq, splits, D] partial outputs,
// then [T, Hq, splits, 2] (running max, sum); 0 for splits <= 1.
size_t attention_decode_workspace_bytes(int T, int Hq, int D, int splits);

// True when the tensor-core prefill runs the shape: D in {32, 64, 128, 256}, q and cache bf16.
bool attention_prefill_mma_supports(int D, DType q_dtype, DType cache_dtype);

// Dynamic shared memory of one block of the tensor-core prefill (bytes): a query tile of 64
// rows and `buffers` (1 or 2) K and V tiles of 64 keys (32 for D = 256), rows padded to D + 8
// bf16, plus the tile's slots and positions; 0 for a D it is not built for. The kernel's own
// constants (attention_prefill_mma.cu) are static_asserted to give these bytes. The model plans
// with one buffer (what the kernel needs at least); the launcher takes two where they fit.
constexpr size_t attention_prefill_mma_smem(int D, int buffers = 2) {
  if (!attention_tuned_head_dim(D) || buffers < 1 || buffers > 2) return 0;
  const size_t rows = 64 + 2 * static_cast<size_t>(buffers) * (D >= 256 ? 32 : 64);
  return rows * static_cast<size_t>(D + 8) * 2 + 2 * 64 * sizeof(int);
}

// True when the wgmma prefill (attention_prefill_wgmma.h, compute capability 9.0) runs the shape:
// D in {64, 128, 256}, q and cache bf16.
bool attention_prefill_wgmma_supports(int D, DType q_dtype, DType cache_dtype);
// True for the devices its sm_90a build runs on: compute capability 9.0 exactly.
constexpr bool attention_prefill_wgmma_device(int cc_major, int cc_minor) { return sm90a_device(cc_major, cc_minor); }

// Dynamic shared memory of one block of the wgmma prefill (bytes): two 64-row query tiles (two
// query heads a block) and a ring of two stages of a K and a V tile of 64 keys (bf16, unpadded),
// plus 1024 bytes to align them for the 128-byte swizzle; 0 for a D it is not built for (a block of
// one query head uses less). The kernel static_asserts its constants against this.
constexpr size_t attention_prefill_wgmma_smem(int D) {
  if (D != 64 && D != 128 && D != 256) return 0;
  return 6 * size_t{64} * static_cast<size_t>(D) * 2 + 1024;
}

// True when the tensor-core decode runs the shape: D in {64, 128, 256}, Hq / Hkv <= 8 (the query
// heads of a kv head are the 8 columns of one mma tile), q and cache bf16.
bool attention_decode_mma_supports(int Hq, int Hkv, int D, DType q_dtype, DType cache_dtype);

// Dynamic shared memory of one block of the tensor-core decode (bytes): each of its 4 warps owns
// a ring of 3 stages of 16 keys' K and V rows (bf16); 0 for a D it is not built for. The kernel
// static_asserts its constants against this.
constexpr size_t attention_decode_mma_smem(int D) {
  if (D != 64 && D != 128 && D != 256) return 0;
  return size_t{4} * 3 * 2 * 16 * static_cast<size_t>(D) * 2;
}

// A split count for a decode bucket of the CUDA-core kernels (attention.h): enough blocks of the
// tuned kernel (T x Hkv x ceil(group / 8), times the splits) to fill `num_sms` SMs four times, at
// least 64 context positions per split, at most 32 splits (the generic kernel launches Hq blocks
// per row and split, so the same count fills at least as many SMs); 1 for an empty shape.
// Depends on the shape only (graph keys), never on live context lengths.
int attention_decode_pick_splits(int T, int Hq, int Hkv, int max_context, int num_sms);

// Blocks of the tensor-core decode one sm_90 SM holds at once for head size D (its 228 KB of
// shared memory over attention_decode_mma_smem(D) and the 1 KB the SM reserves a block), for
// attention_decode_mma_pick_splits; 0 for a D it is not built for.
constexpr int attention_decode_mma_blocks_per_sm(int D) {
  const size_t bytes = attention_decode_mma_smem(D);
  if (bytes == 0) return 0;
  constexpr size_t kSmemPerSm = 228 * 1024, kReservedPerBlock = 1024;
  const size_t n = kSmemPerSm / (bytes + kReservedPerBlock);
  return static_cast<int>(n > 0 ? n : 1);
}

// Split count of the tensor-core decode for a bucket of T rows (T x Hkv x splits blocks, waves of
// `blocks_per_sm` x `num_sms`): the smallest within 3% of the least modelled time, waves x
// (max_context / splits + 64), with at least 64 context positions per split, at most 64 splits.
// Depends on the shape only (graph keys), never on live context lengths.
int attention_decode_mma_pick_splits(int T, int Hkv, int max_context, int num_sms, int blocks_per_sm);

}  // namespace sg
