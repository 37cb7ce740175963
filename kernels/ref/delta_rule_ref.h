// delta_rule_ref.h: CPU reference of the gated delta rule (docs/MODEL.md, step 4): the decode step,
// the recurrent prefill (the same step per token, f32, bit-exact with decode) and the chunked
// prefill (WY representation, computed in double) used as an accurate oracle for chunked GPU kernels.
//
// State layout: [num_slots, Hv, Dk, Dv], S[i][j] at (i * Dv + j), i over Dk, j over Dv, held in a
// float buffer whatever DeltaShape::state says. The arithmetic is the same for both settings (f32
// decode and recurrent prefill, double chunked prefill); DeltaShape::state only says how the state
// is stored between calls. Store::f32: as computed. Store::bf16 (the bf16 ssm-state setting): every
// state element the reference writes is rounded to nearest-even bf16 (sg::round_bf16, the GPU's
// __float2bfloat16_rn), so the buffer always holds bf16-representable values, and it is read as is
// (a bf16 value widened to f32 is exact). Where it rounds: decode, each (row, v-head)'s state after
// its step; the recurrent prefill, each sequence's final state once (the state stays f32 across the
// tokens of one call, as in the GPU kernels); the chunked prefill, the final state double -> f32 ->
// bf16 once. With Store::bf16 the caller's initial state must be bf16-representable (as it is when
// it was read from a bf16 buffer): the reference does not round what it reads.
// The q/k head of v-head hv is hv / (Hv / Hk). Slot indices must be < num_slots (not checkable:
// num_slots is not passed); slots of non-padding rows/sequences must be distinct (checked).
// The math, per token: q' = q * Dk^-0.5; S = S * exp(g); u = (v - S^T k) * beta; S = S + k u^T;
// o = S^T q'. q and k are expected to be L2-normalised (postconv) but nothing here depends on it.
#pragma once
#include <cstdint>

#include "kernels/ref/ref_common.h"

namespace sg::ref {

struct DeltaShape {
  int Hk, Hv, Dk, Dv;        // all >= 1, Hv a multiple of Hk
  Store out = Store::bf16;   // how outputs are stored
  Store state = Store::f32;  // how the state is stored between calls: bf16 rounds it on its way out (above)
};

// Decode: one recurrent step per row, f32, in exactly this order for each (row, hv):
//   decay = std::exp(g); scale = 1.0f / std::sqrt((float)Dk);
//   S[i][j] = S[i][j] * decay;
//   for j: kv = 0; for i = 0..Dk-1: kv = fma(S[i][j], k[i], kv); u_j = (v[j] - kv) * beta;
//   S[i][j] = fma(k[i], u_j, S[i][j]);
//   for j: o = 0; for i: o = fma(S[i][j], q[i] * scale, o); out[j] = store(o, out).
// then, with Store::bf16 state, S[i][j] = store(S[i][j], state) for the whole head.
// A row with slot < 0 is padding: its output row is 0 and its state is neither read nor written.
// Throws std::invalid_argument on bad arguments (sizes < 1, B < 0, Hv % Hk != 0, null pointers
// when B > 0, duplicate slots).
void delta_rule_decode(const DeltaShape& s, int B,
                       const float* q,        // [B, Hk, Dk]
                       const float* k,        // [B, Hk, Dk]
                       const float* v,        // [B, Hv, Dv]
                       const float* g,        // [B, Hv]
                       const float* beta,     // [B, Hv]
                       const int32_t* slots,  // [B]; < 0 marks a padding row
                       float* state,          // [num_slots, Hv, Dk, Dv] as s.state says, updated in place
                       float* out);           // [B, Hv, Dv]

// Prefill, recurrent form: the decode step applied token by token (so a recurrent prefill of n
// tokens followed by m decode steps equals a recurrent prefill of n + m tokens, bit for bit, with
// Store::f32 state; with Store::bf16 the state is rounded once at the end of each call, so the split
// of the tokens into calls matters).
// Sequence n owns tokens cu_seqlens[n] .. cu_seqlens[n+1]-1; it starts from state[slot] when
// has_history[n] != 0, else from zeros, and its final state is written to state[slot].
// A sequence with slot < 0 is padding: outputs 0, no state read or written. Decided here (as for
// conv_fwd): a zero-length sequence leaves its state exactly as it was (no read, no write).
// Throws std::invalid_argument on bad arguments (as decode, plus N < 0 and bad cu_seqlens).
void delta_rule_prefill_recurrent(const DeltaShape& s, int N,
                                  const int32_t* cu_seqlens,   // [N+1], 0, non-decreasing; T = cu_seqlens[N]
                                  const float* q,              // [T, Hk, Dk]
                                  const float* k,              // [T, Hk, Dk]
                                  const float* v,              // [T, Hv, Dv]
                                  const float* g,              // [T, Hv]
                                  const float* beta,           // [T, Hv]
                                  const int32_t* slots,        // [N]; < 0 marks a padding sequence
                                  const uint8_t* has_history,  // [N]; 0: start from a zero state
                                  float* state,                // [num_slots, Hv, Dk, Dv] as s.state says
                                  float* out);                 // [T, Hv, Dv]

// Prefill, chunked form (Gated DeltaNet paper / FLA chunk_gated_delta_rule): per chunk of up to
// `chunk` tokens with in-chunk cumulative gates G_r = g_0 + ... + g_r,
//   A[r][s] = beta_r exp(G_r - G_s) (k_r . k_s) for s < r;  T = (I + A)^-1 (forward substitution);
//   W = T (beta exp(G) K);  U = T (beta V);  U' = U - W S0 (the true u of each token);
//   o_r = exp(G_r) S0^T q'_r + sum_{s<=r} exp(G_r - G_s) (q'_r . k_s) U'_s;
//   S = exp(G_last) S0 + sum_s exp(G_last - G_s) k_s U'_s^T.
// Same contract as the recurrent form (padding, zero-length sequences, history, state writes).
// Precision: everything inside is double (inputs and the initial state widened exactly); the
// output is rounded double -> f32 -> store(out), the final state double -> f32 -> store(state). Only bounded
// exponentials are formed (exp of G differences with s <= r), so fast decay cannot overflow.
// Guaranteed agreement with delta_rule_prefill_recurrent, as normalised error ||a-b|| / ||b||
// per sequence (its outputs over all tokens and heads) and per slot (its final state), measured
// by tests/cpu/test_ref_delta_rule.cpp on unit-norm q, k, v in [-1, 1], beta in (0, 1), g in
// [-1, 0], [-20, -5] and [-1e-4, 0], lengths 1..200 with and without history, chunk 16 and 64,
// (Hk, Hv, Dk, Dv) = (1, 2, 32, 32), (2, 4, 32, 16), (1, 2, 128, 128):
//   outputs with Store::f32:  <= 1e-5  (measured worst 1.4e-6, with fast decay);
//   final state (f32):        <= 1e-5  (measured worst 3.8e-7);
//   outputs with Store::bf16: <= 8e-3  (measured worst 9.0e-5; the bound is two bf16 steps,
//                                      2 * 2^-8, so it holds even if every element rounds to a
//                                      neighbouring bf16 value).
// The recurrent form is the one in error: it accumulates f32 rounding over the sequence.
// The tensor-core kernel (delta_rule_prefill_mma.h: bf16 mma with f32 operands split into two bf16
// parts) is held to <= 1e-4 against this form for f32 outputs and the final state (measured worst
// over tests/gpu/test_delta_rule_prefill_mma.cpp: outputs 1.8e-5, state 5.7e-6; fast decay g in
// [-20, -5]: 1.2e-5, 5.4e-6), bf16 outputs to the bounds above.
// Throws std::invalid_argument on bad arguments (as the recurrent form, plus chunk < 1).
void delta_rule_prefill_chunked(const DeltaShape& s, int N,
                                const int32_t* cu_seqlens,   // [N+1]
                                const float* q,              // [T, Hk, Dk]
                                const float* k,              // [T, Hk, Dk]
                                const float* v,              // [T, Hv, Dv]
                                const float* g,              // [T, Hv]
                                const float* beta,           // [T, Hv]
                                const int32_t* slots,        // [N]
                                const uint8_t* has_history,  // [N]
                                float* state,                // [num_slots, Hv, Dk, Dv] as s.state says
                                float* out,                  // [T, Hv, Dv]
                                int chunk = 64);

}  // namespace sg::ref
