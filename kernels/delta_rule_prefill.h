// delta_rule_prefill.h: the gated delta rule, prefill over a packed varlen batch, as the
// REFERENCE-EXACT SEQUENTIAL SCAN: one program per (v-head, sequence) walks the sequence's tokens in
// order and applies, per token, exactly the decode step of delta_rule.h / delta_rule_device.cuh
// (same fmaf chains in the same order, q scaled by 1/sqrtf(Dk), S *= expf(g), same column split
// over Q lanes). The state column lives in registers for the whole sequence (read once, written
// once) instead of going through memory per token; that changes no rounding, so the outputs and
// the final state are byte-identical to calling delta_rule_decode token by token with the same
// split, and equal ref::delta_rule_prefill_recurrent up to expf vs std::exp.
// This is the correctness baseline, not the fast path: its parallelism is Hv x sequences and its
// latency is linear in the sequence length. The chunked WY form (docs/MODEL.md step 4) is
// delta_rule_prefill_chunked.h (about 1.85x faster on the 4B prefill); it is not byte-equal to this
// scan (a different summation), only within the reference's documented tolerance.
//
// State: [num_slots, Hv, Dk, Dv] f32 or bf16 (state_dtype), S[i][j] at (i * Dv + j), as delta_rule.h.
// With bf16 the initial state is widened once and the final state rounded to nearest even once (the
// state stays f32 in between), so a bf16-state prefill gives the f32-state prefill's outputs and its
// final state rounded; decode token by token with a bf16 state rounds after every token instead.
// The same holds for the chunked forms (delta_rule_prefill_chunked.h, delta_rule_prefill_mma.h).
// Contract (ref::delta_rule_prefill_recurrent, kernels/ref/delta_rule_ref.h):
//   - sequence n (n < *n_seqs) owns tokens cu_seqlens[n] .. cu_seqlens[n+1]-1 (absolute rows);
//   - slot < 0 (padding): its output rows are written with zeros, state is neither read nor written;
//   - zero length: nothing is read or written (its state stays as it was, even without history);
//   - has_history[n] == 0: starts from a zero state (state[slot] is not read), and its final state
//     is written to state[slot];
//   - programs n >= *n_seqs exit at once (cu_seqlens, slots, has_history are not read for them);
//     output rows >= cu_seqlens[*n_seqs] are not touched.
// State I/O race freedom: the program (hv, n) is the only one touching state[slot][hv] (slots of
// live non-padding sequences are distinct, as the reference requires), and each thread reads its
// own state rows before it writes them.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/delta_rule_prefill_shapes.h"
#include "kernels/launch_check.h"
#include "kernels/numeric.h"

namespace sg {

struct DeltaRulePrefillParams {
  const void* q = nullptr;        // [>= T, Hk, Dk]
  const void* k = nullptr;        // [>= T, Hk, Dk]
  const void* v = nullptr;        // [>= T, Hv, Dv]
  DType qkv_dtype = DType::bf16;  // f32 or bf16 (q, k, v alike)
  const float* g = nullptr;       // [>= T, Hv] log decay (S *= expf(g))
  const float* beta = nullptr;    // [>= T, Hv]

  // Per-step metadata, all in device memory (a captured graph reads the live values at replay).
  const int32_t* cu_seqlens = nullptr;   // [max_seqs + 1]: first *n_seqs + 1 entries live, cu[0] = 0,
                                         //   non-decreasing; T = cu[*n_seqs]
  const int32_t* slots = nullptr;        // [max_seqs]; < 0: padding sequence
  const uint8_t* has_history = nullptr;  // [max_seqs]; 0: start from a zero state
  const int32_t* n_seqs = nullptr;       // [1] live sequence count, 0..max_seqs

  void* state = nullptr;           // [num_slots, Hv, Dk, Dv] state_dtype, updated in place
  DType state_dtype = DType::f32;  // f32, or bf16: read widened once, the final state rounded to nearest once
  void* out = nullptr;             // [>= T, Hv, Dv]; must not alias any input or the state
  DType out_dtype = DType::bf16;

  int max_seqs = 0;  // the graph key's bucket: grid y
  int Hk = 0, Hv = 0, Dk = 0, Dv = 0;
  int split = 0;  // threads per state column (1, 2, 4, 8; 0 = automatic), as delta_rule_decode_split

  // Optional fused output norm (the GDN layer's gated RMSNorm, rmsnorm.h), built in the mma form
  // only (delta_rule_prefill_mma.h says where; the other launchers refuse norm_w): with norm_w set,
  // out receives exactly the bytes that this launch without it followed by gated_rmsnorm (16-byte
  // path, in place on out, z and w as here, live_rows = norm_live, T = norm_rows) would give:
  // every row of a live sequence normed from its bf16 output, a padding sequence's rows normed
  // from zeros, rows norm_live .. norm_rows - 1 zeros. norm_live must hold cu_seqlens[*n_seqs];
  // with max_seqs 0 nothing is launched (no row is written).
  const void* norm_z = nullptr;  // [norm_rows, Hv, Dv] bf16 at token stride norm_z_stride
  int64_t norm_z_stride = 0;     // 0 = Hv * Dv
  const void* norm_w = nullptr;  // [Dv] f32 or bf16, used as is
  DType norm_w_dtype = DType::f32;
  float norm_eps = 1e-6f;
  const int32_t* norm_live = nullptr;  // [1] the live token count
  int norm_rows = 0;                   // out's rows (the token bucket)
};

// The shapes each form launches, their Dv tiles and shared memory: delta_rule_prefill_shapes.h
// (delta_rule_prefill_supports for this scan).

// Grid (Hv, max_seqs), block round_up(Dv * q, 32) with q = delta_rule_decode_split(Dk, Dv, split)
// (the decode kernel's split and launch bounds; every split gives the same bytes, and prefill with
// split q equals decode token by token with split q). Static shared memory 4 * Dk floats (q and k
// of the current and the next token: the next token's q/k/v/g/beta are loaded while the current
// one is computed). Returns cudaErrorInvalidValue on an unsupported shape or split, Hk < 1,
// Hv % Hk != 0, max_seqs < 0 or > 65535, or a null pointer; cudaSuccess without launching when
// max_seqs == 0; else the launch error (cudaGetLastError). Never throws.
cudaError_t delta_rule_prefill(const DeltaRulePrefillParams& p, cudaStream_t stream);
// The checks both prefill launchers (this and the chunked form) make of the params they share:
// heads, max_seqs, pointers and dtypes (launch_check.h).
void check_delta_rule_prefill_params(LaunchCheck& chk, const DeltaRulePrefillParams& p);
// The refusal of norm_w by the launchers that have no fused norm (the scan and the chunked form).
void refuse_delta_rule_prefill_norm(LaunchCheck& chk, const DeltaRulePrefillParams& p);

}  // namespace sg
