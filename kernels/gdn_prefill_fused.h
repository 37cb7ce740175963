// gdn_prefill_fused.h: the `fused` arm of gdn.prefill: the varlen causal conv prefill (conv.fwd) and
// the post-conv prep (postconv) of a packed batch of sequences in ONE launch. The conv output is
// never stored: each program rounds it to the activation dtype in registers (where conv.fwd would
// store it and postconv read it back), then splits it into q, k, v, L2-normalises q and k per head
// and writes q, k, v exactly where postconv writes them (the layout delta_rule_prefill reads), and
// the gates g, beta. The conv state is updated exactly as conv.fwd updates it.
//
// Bytes: identical to conv.fwd (reference arm `tiled`) followed by postconv (reference arm
// `megablock`) on the same inputs, for q, k, v, the conv state, and g, beta of every token of a
// non-padding sequence: the same f32 operations in the same order (the kernels build with
// -fmad=false; the conv step, SiLU, row I/O, sum-of-squares tree and gate formulas are the shared
// device functions of conv_fwd_common.cuh and postconv_common.cuh). One documented difference:
// tokens of a padding sequence (slot < 0) get zero q, k, v, g AND beta here, where the unfused path
// writes zero q, k, v (conv.fwd zeroes the conv rows) but computes g and beta from a and b.
//
// Work: token tiles of kGdnPrefillTileTokens (64) over [0, max_tokens), channel groups of 128 (q
// head h, k head h, then the v region cut into 128-channel pieces; the last may be narrower). A
// block = one tile x 8 groups, a half-warp per group, lane m of the half holding channels 8m..8m+7
// (one 16-byte load per token for bf16); per tile one more block computes the tile's g and beta.
// Grid from gdn_prefill_contract: depends only on (max_tokens, Hk, Hv, Dv); programs whose tile
// starts at or beyond the live T exit at once. Rows >= T of q, k, v, g, beta are never written
// (as the unfused path with postconv's T = the live T).
//
// State I/O: why no block can read conv state that another block of the same launch writes.
//   Tile i's work range is [lo_i, lo_{i+1}) with lo_j = j*64, except when token j*64 lies in a
//   sequence that started before it (start b, end e): then lo_j = max(j*64, min(b + K-1, e)). The
//   ranges partition [0, T), and the first min(K-1, len) tokens of every sequence (its "head", the
//   only tokens whose taps reach before the sequence start) lie in ONE tile, the tile whose range
//   contains the sequence start (K-1 <= 7 < 64, so a head crosses at most into the next nominal
//   tile, which starts after it). For each sequence and channel group, the program of that tile
//   and group (the owner) is the only one that reads state[slot] of those channels: its threads
//   read the old K-1 entries of their own channels into registers, then write the new entries (the
//   sequence's last K-1 raw inputs, read from x, which nothing writes; or for a sequence shorter
//   than K-1 the old entries shifted, then the tokens), each thread only its own channels' rows,
//   reads before writes in program order. Every other program that handles tokens of the
//   sequence starts at least K-1 tokens into it, so its left taps are x rows of the same sequence:
//   it never touches the state. Slots of non-padding sequences are distinct, so owners of different
//   sequences touch disjoint rows; padding sequences (slot < 0) and zero-length sequences touch no
//   state (a zero-length sequence keeps its state whatever its history flag, as conv.fwd).
//   Hence each state row is read and written by one thread of one program, reads first: the seed's
//   race (a later block reading the initial state after the first block overwrote it) cannot exist.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/arms.h"
#include "kernels/contracts.h"
#include "kernels/numeric.h"

namespace sg {

struct GdnPrefillFusedParams {
  const void* x = nullptr;  // [>= T, x_stride] conv inputs, channels q | k | v (C = 2*Hk*Dk + Hv*Dv);
  int64_t x_stride = 0;     //   x_stride >= C, columns >= C never read
  DType act = DType::bf16;  // x's dtype, and the dtype the conv output is rounded to (as conv.fwd's out)
  void* state = nullptr;    // [num_slots, C, K-1] last K-1 raw inputs per channel, oldest first
  DType state_dtype = DType::bf16;
  const float* w = nullptr;     // [C, K] f32, tap 0 oldest
  const float* bias = nullptr;  // [C] f32 or null
  bool silu = true;

  const void* a = nullptr;  // [>= T, a_stride], first Hv used
  int64_t a_stride = 0;
  const void* b = nullptr;  // [>= T, b_stride], first Hv used
  int64_t b_stride = 0;
  DType ab_dtype = DType::bf16;
  const float* A_log = nullptr;    // [Hv]
  const float* dt_bias = nullptr;  // [Hv]

  void* q = nullptr;  // [>= T, Hk, Dk]
  void* k = nullptr;  // [>= T, Hk, Dk]
  void* v = nullptr;  // [>= T, Hv, Dv]
  DType qkv_dtype = DType::bf16;
  float* g = nullptr;     // [>= T, Hv] f32
  float* beta = nullptr;  // [>= T, Hv] f32

  // Per-step metadata in device memory (a captured graph reads the live values at replay), as
  // conv.fwd's: the first n_seqs + 1 entries of cu_seqlens live, cu[0] = 0, non-decreasing,
  // T = cu[n_seqs] <= max_tokens, n_seqs <= max_seqs (the kernel traps otherwise).
  const int32_t* cu_seqlens = nullptr;   // [max_seqs + 1]
  const int32_t* slots = nullptr;        // [max_seqs]; < 0: padding sequence
  const uint8_t* has_history = nullptr;  // [max_seqs]; 0: taps before the first token read 0
  const int32_t* n_seqs = nullptr;       // [1] live sequence count N, 0..max_seqs

  int Hk = 0, Hv = 0, Dk = 0, Dv = 0, K = 0;
  int max_tokens = 0, max_seqs = 0;  // the graph key's bucket: the contract's grid depends on these
};

// Launches the fused kernel. `c` must be gdn_prefill_contract(fused, {max_tokens, max_seqs, Hk, Hv,
// Dk, Dv, K}) of the params, with the fused arm (a fallback to unfused cannot be launched here);
// else, or on an unsupported shape (gdn_prefill_fused_supports), a dtype other than f32/bf16, a
// stride below its minimum or a missing pointer, returns cudaErrorInvalidValue without launching.
// Requires (not checkable on the host): the outputs alias no input, the state or each other; slots
// of non-padding sequences distinct. Returns the launch error (cudaGetLastError); never throws.
cudaError_t gdn_prefill_fused(const GdnPrefillFusedParams& p, const LaunchContract<GdnPrefillArm>& c,
                              cudaStream_t stream);

}  // namespace sg
