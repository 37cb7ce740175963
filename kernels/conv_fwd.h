// conv_fwd.h: the GDN causal depthwise conv, prefill form (`conv.fwd`), over a packed varlen batch
// of sequences with slot-indexed conv state (docs/MODEL.md "Causal conv", "Caches and slots").
//
// Arithmetic (every arm, byte-identical; the kernels build with -fmad=false):
//   acc = bias ? bias[c] : 0; acc = fmaf(w[c*K + j], tap_j, acc) for j = 0..K-1 (tap 0 oldest);
//   out = silu ? acc / (1 + expf(-acc)) : acc, rounded once to the output dtype.
// Tap j of token t of a sequence reads its token t-(K-1-j); a negative index reads the sequence's
// old conv state (the last K-1 raw inputs of its previous segment) when has_history, else 0.
// New state of a sequence of len >= 1 tokens: the last K-1 entries of [old state (zeros without
// history), x_0, ..., x_{len-1}], each stored in the state dtype. A zero-length sequence leaves its
// state untouched; a padding sequence (slot < 0) gets zero output rows and no state access. This is
// ref::conv_fwd exactly (kernels/ref/conv_ref.h).
//
// Arms (ARMS.md): conv.fwd = tiled (the byte reference) | register | k4 | k4x2, each with the work
// split conv.chunks = exact (one program per (8-token chunk descriptor, channel tile)) | whole (one
// program per (sequence, channel tile), looping over all its tokens). Grids come from
// conv_fwd_contract() and depend only on (max_tokens, max_seqs, C, K): programs beyond the live
// work (device counts) exit at once, so one captured graph serves every batch composition of its
// bucket.
//
// State I/O: why no program can read state that another program of the same launch writes.
//   1. Per sequence exactly one program per channel tile owns state[slot]: for `exact` the program
//      of the sequence's FIRST chunk (descriptor start == cu_seqlens[seq]), for `whole` the
//      sequence's program. Only the owner reads state[slot] and only the owner writes it; each
//      channel tile touches only its own channels' state rows.
//   2. The owner reads the old history it needs first (the tiled arm: into shared memory, then
//      __syncthreads; the register arms: the same thread reads, then later writes, its own
//      channel), and only then writes the new state, computed from global x (the sequence's last
//      K-1 inputs, which may lie in another chunk: x is read-only, so that is no race) or, for a
//      sequence shorter than K-1, from the old history it holds plus x.
//   3. A later chunk starts >= kConvChunkTokens tokens after its sequence's start, and its K-1 <=
//      kConvMaxK-1 <= kConvChunkTokens left taps are therefore tokens of the same sequence, read
//      from x: a non-owner never needs (and never reads) state. (A static_assert in
//      conv_fwd_common.cuh pins K-1 <= chunk tokens; a descriptor table that breaks the chunking,
//      i.e. not build_conv_chunks(cu, kConvChunkTokens), traps.)
//   4. Slots of non-padding sequences are distinct (as ref::conv_fwd requires), so owners of
//      different sequences touch disjoint state rows.
//   Hence every state row is read and written by one program, reads before writes: no race can
//   exist, whatever order the programs run in (the seed's 2661-wrong-output regression was a
//   later block reading the initial state that the first block had already overwritten).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/arms.h"
#include "kernels/contracts.h"
#include "kernels/numeric.h"

namespace sg {

struct ConvFwdParams {
  const void* x = nullptr;  // [>= T, x_stride] raw inputs, x_stride >= C (may be a view into a
  int64_t x_stride = 0;     //   wider projection output; columns >= C are never read)
  DType x_dtype = DType::bf16;
  void* out = nullptr;  // [>= T, C]; rows of live tokens are all written, others untouched
  DType out_dtype = DType::bf16;
  void* state = nullptr;  // [num_slots, C, K-1] last K-1 raw inputs per channel, oldest first
  DType state_dtype = DType::bf16;
  const float* w = nullptr;     // [C, K] f32, tap 0 oldest
  const float* bias = nullptr;  // [C] f32 or null
  bool silu = true;

  // Per-step metadata, all in device memory (a captured graph reads the live values at replay).
  const int32_t* cu_seqlens = nullptr;   // [max_seqs + 1]: first n_seqs + 1 entries live, cu[0] = 0,
                                         //   non-decreasing; T = cu[n_seqs]
  const int32_t* slots = nullptr;        // [max_seqs]; < 0: padding sequence
  const uint8_t* has_history = nullptr;  // [max_seqs]; 0: taps before the first token read 0
  const int32_t* n_seqs = nullptr;       // [1] live sequence count N, 0..max_seqs
  // `exact` only (may be null for `whole`): build_conv_chunks(cu_seqlens, kConvChunkTokens) of the
  // live batch, in a buffer of conv_max_chunks(max_tokens, max_seqs) entries (the tail is never
  // interpreted), and its live count.
  const ConvChunk* chunks = nullptr;
  const int32_t* n_chunks = nullptr;  // [1] live descriptor count

  int C = 0, K = 0;                  // channels; conv width 2..8
  int max_tokens = 0, max_seqs = 0;  // the graph key's bucket: the contract's grid depends on these
};

// Launches the contract's arm with the given work split. `c` must be conv_fwd_contract(arm,
// chunks, {max_tokens, max_seqs, C, K}) for the params (checked: else cudaErrorInvalidValue).
// dtypes: tiled takes any mix of f32/bf16 for x, out and state; register, k4 and k4x2 need
// x_dtype == out_dtype (f32 or bf16; state f32 or bf16), else cudaErrorInvalidValue.
// Requires (not checkable on the host): out does not alias x or state; the metadata as above.
// Returns the launch error (cudaGetLastError) without throwing.
cudaError_t conv_fwd(const ConvFwdParams& p, const LaunchContract<ConvFwdArm>& c, ConvChunksArm chunks,
                     cudaStream_t stream);

}  // namespace sg
