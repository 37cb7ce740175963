// conv_ref.h: CPU reference of the GDN causal depthwise conv (docs/MODEL.md, step 2): the decode
// update (one token per row) and the varlen prefill. Plain loops in the contract's exact f32
// operation order: the GPU arms reproduce these outputs and states bit for bit, except that the
// CPU's std::exp and the GPU's expf may differ by an ulp when silu is on.
//
// Conv state layout: [num_slots, C, K-1], the last K-1 raw (pre-conv) inputs of the slot's
// sequence, oldest first, stored with ConvShape::state. Slot indices must be < num_slots (not
// checkable here: num_slots is not passed); slots of non-padding rows must be distinct (checked).
#pragma once
#include <cstdint>

#include "kernels/ref/ref_common.h"

namespace sg::ref {

struct ConvShape {
  int C;                      // channels (>= 1)
  int K;                      // conv width (>= 1); the state holds K-1 values per channel
  bool silu = true;           // apply acc / (1 + exp(-acc)) before storing
  Store out = Store::bf16;    // how outputs are stored
  Store state = Store::bf16;  // how raw inputs are stored into the conv state
};

// Decode update, one new token per row. For row b with slot >= 0 and channel c:
//   taps 0..K-2 read state[slot, c, 0..K-2] (oldest first), tap K-1 reads x[b, c];
//   acc = bias ? bias[c] : 0; acc = fma(w[c, j], tap_j, acc) for j = 0..K-1; silu; out = store(acc, out);
//   then the state row rolls left by one and store(x[b, c], state) is appended.
// A row with slot < 0 is padding: its output row is set to 0, no state is read or written.
// Throws std::invalid_argument on bad arguments (C < 1, K < 1, B < 0, x_stride < C, null pointers;
// state may be null only when K == 1, bias may always be null; duplicate slots).
void conv_update(const ConvShape& s, int B,
                 const float* x,  // [B, x_stride], x_stride >= C; columns >= C never read
                 int64_t x_stride,
                 const int32_t* slots,  // [B]; < 0 marks a padding row
                 float* state,          // [num_slots, C, K-1], updated in place
                 const float* w,        // [C, K], tap j = 0 oldest .. K-1 current
                 const float* bias,     // [C] or nullptr
                 float* out);           // [B, C]

// Prefill over a packed varlen stream of N sequences; sequence n owns tokens
// cu_seqlens[n] .. cu_seqlens[n+1]-1. Tap j of token t reads token t-(K-1-j); a negative index
// reads state[slot] (K-1 values, oldest first) when has_history[n] != 0, else 0.
// Arithmetic per (token, channel) exactly as conv_update.
// New state of a sequence with len >= 1 tokens: the last K-1 entries of
//   [old state (zeros when it has no history), store(x_0, state), ..., store(x_{len-1}, state)],
// i.e. the last K-1 raw inputs, or for len < K-1 the old state shifted left by len, then the
// new tokens. The whole old state row is read before any of it is written.
// Decided here: a zero-length sequence leaves its state exactly as it was (no read, no write),
// whatever its has_history flag. A sequence with slot < 0 is padding: its output rows are 0 and
// no state is read or written.
// Throws std::invalid_argument on bad arguments (as conv_update, plus N < 0, cu_seqlens not
// starting at 0 or decreasing).
void conv_fwd(const ConvShape& s, int N,
              const int32_t* cu_seqlens,  // [N+1], cu_seqlens[0] = 0, non-decreasing; T = cu_seqlens[N]
              const float* x,             // [T, x_stride], x_stride >= C; columns >= C never read
              int64_t x_stride,
              const int32_t* slots,        // [N]; < 0 marks a padding sequence
              const uint8_t* has_history,  // [N]; nonzero: taps before the first token read state[slot]
              float* state,                // [num_slots, C, K-1], updated in place
              const float* w,              // [C, K]
              const float* bias,           // [C] or nullptr
              float* out);                 // [T, C]

}  // namespace sg::ref
