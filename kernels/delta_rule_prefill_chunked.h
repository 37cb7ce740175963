// delta_rule_prefill_chunked.h: the gated delta rule's prefill over a packed varlen batch in the
// CHUNKED WY FORM (docs/MODEL.md step 4; ref::delta_rule_prefill_chunked is its double-precision
// oracle), with the params struct and contract of delta_rule_prefill (delta_rule_prefill.h). The
// sequential dependency is per chunk of 64 tokens instead of per token, and inside a chunk all the
// work is small matrix products that run on the CUDA cores in f32 FMA (no tensor cores: bf16/tf32
// products would not meet the f32 tolerance).
//
// Per chunk of L <= 64 tokens (rows r, c), with G_r = g_0 + ... + g_r (cumulated in double):
//   A[r][c] = beta_r exp(G_r - G_c) k_r.k_c  (c < r)      T = (I + A)^-1   (unit lower triangular)
//   P[r][c] = exp(G_r - G_c) q'_r.k_c        (c <= r)     q' = q / sqrt(Dk)
//   X_r     = beta_r (v_r - exp(G_r) S^T k_r)              V' = T X   (the true u of each token)
//   o_r     = exp(G_r) S^T q'_r + sum_c P[r][c] V'_c
//   S       = exp(G_last) S + sum_c exp(G_last - G_c) k_c V'_c^T
// This is ref::delta_rule_prefill_chunked's U - W S0 with W S0 folded into X (T diag(beta) (V - exp(G) K S)),
// so W [L, Dk] is never formed. Only bounded exponentials are formed (c <= r, G_last - G_c <= 0 for
// g <= 0); exp(G_r - G_c) is taken of the double difference, so fast decay loses no precision.
//
// Design: one block per (Dv tile of BV columns, v-head, sequence): grid (ceil(Dv / BV) * Hv, max_seqs),
// block 4 * BV threads. Columns of the state are independent in the delta rule; only A, P and T
// (64 x 64, from k, q, g, beta alone) are recomputed by each tile. The state tile [Dk, BV] f32 stays
// in shared memory for the whole sequence (read once, written once; a bf16 state, state_dtype, is
// widened on the read and rounded to nearest even on the write). The large products are register
// tiled (each thread a 4 x 4 or larger output tile, 128-bit shared loads, broadcasts within a warp;
// the small M and T10 steps of the inversion compute one output per thread);
// T is inverted blockwise (two 32 x 32 diagonal blocks by column-wise forward substitution, then
// the off-diagonal block -T11 A10 T00). Seven block barriers per chunk. BV = 128 (512 threads, ~197 KB
// of dynamic shared memory for Dk = 128) is the automatic choice when Dv is a multiple of 128: no
// work is repeated across tiles; BV = 64 or 32 leave less padding for other Dv (64 / 96 divide
// exactly; 40 runs as two tiles of 32 with the second masked past column 40).
//
// Contract: exactly delta_rule_prefill's (padding slot < 0: zero output rows, state untouched;
// zero-length sequences touch nothing; has_history; device-side n_seqs; programs n >= *n_seqs exit
// before reading metadata; output rows >= cu_seqlens[*n_seqs] untouched; the block (tile, hv, n) is
// the only one touching state[slot][hv][:, tile columns], and each thread reads its own state
// elements before it writes them). p.split is ignored. Causal also for non-finite values: a NaN or
// Inf in one token's inputs reaches no earlier token's output (terms above the diagonal are
// skipped or selected away, never multiplied by zero), as in the scan. Accuracy: not byte-equal to the scan; within
// the chunked-vs-recurrent normalised tolerance of delta_rule_ref.h (f32 outputs and state 1e-5).
// Grid and shared memory depend on max_seqs and the shape only (graph-safe: no allocation, no host
// synchronisation).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/delta_rule_prefill.h"

namespace sg {

// Its shapes (delta_rule_prefill_chunked_supports), automatic Dv tile (delta_rule_prefill_chunked_tile)
// and dynamic shared memory a block (delta_rule_prefill_chunked_smem): delta_rule_prefill_shapes.h.

// Launches the chunked prefill. dv_tile: 0 = automatic, else 32, 64 or 128 (every tile gives
// results within the tolerance; they differ only in speed). Returns cudaErrorInvalidValue on an
// unsupported shape or tile, Hk < 1, Hv % Hk != 0, max_seqs < 0 or > 65535, a null pointer or a
// dtype other than f32/bf16; cudaSuccess without launching when max_seqs == 0; else the error of
// cudaFuncSetAttribute (dynamic shared memory above 48 KB) or of the launch. Never throws.
cudaError_t delta_rule_prefill_chunked(const DeltaRulePrefillParams& p, cudaStream_t stream, int dv_tile = 0);

}  // namespace sg
