// delta_rule_prefill_mma.h: the gated delta rule's prefill over a packed varlen batch in the
// chunked WY form (docs/MODEL.md step 4) with its large products on the TENSOR CORES (mma.sync
// m16n8k16 bf16 -> f32), with the params struct and contract of delta_rule_prefill
// (delta_rule_prefill.h). It follows delta_rule_prefill_chunked.h phase by phase (same chunk of 64
// tokens, same grid, the f32 state tile resident in shared memory for the whole sequence, T = (I + A)^-1
// by the same blockwise substitution on the CUDA cores); the products
//   P, A = [q; k] K^T (lower triangle)    X, O = [q; k] S    V' = T X
//   o = O + P V'                          S = exp(G_last) S + K^T (exp(G_last - G) V')
// run on the tensor cores. Operands are read from the f32 shared tiles into bf16 fragments: q and k
// with bf16 inputs are exactly bf16 (1/sqrt(Dk), exp(G) and beta are applied to the f32 results,
// exp(G_last - G) to V'), one part; every other operand (S, T, X, P, V', and q, k with f32 inputs)
// is split into a high and a low bf16 part (mma::split_pair<2>: x = hi + lo + r, |r| <= 2^-16 |x|)
// and multiplied as lo*hi + hi*lo + hi*hi (the lo*lo term, <= 2^-16 of the product, is dropped).
// So this is NOT byte-equal to the chunked kernel: a new value of the --delta-prefill setting, not an arm.
//
// Causal also for non-finite values: entries of P, A and T above the diagonal are selected away
// (never multiplied by zero); on the diagonal 16 x 16 tile of P V' and T X (where the mma multiplies
// an earlier row by a later token's V' or X), non-finite V' / X values are read as 0 and the rows at
// or past a column's first non-finite value get NaN afterwards, as the plain product would; so a NaN
// or Inf in one token's inputs reaches no earlier token's output (as in the scan).
//
// Accuracy: within the normalised tolerance of delta_rule_ref.h for this kernel against
// ref::delta_rule_prefill_chunked (double): f32 outputs and the final state 1e-4 (see there for the
// measured values); bf16 outputs as the chunked kernel (2 bf16 ulp + 1e-4 per element, 8e-3 normalised).
//
// Contract: exactly delta_rule_prefill_chunked's (padding slot < 0: zero output rows, state
// untouched; zero-length sequences touch nothing; has_history; device-side n_seqs; programs
// n >= *n_seqs exit before reading metadata; output rows >= cu_seqlens[*n_seqs] untouched; the block
// (tile, hv, n) is the only one touching state[slot][hv][:, tile columns]). p.split is ignored.
// Deterministic (mma.sync and a fixed order). Grid (ceil(Dv / BV) * Hv, max_seqs), block 4 * BV
// threads, dynamic shared memory delta_rule_prefill_mma_smem(Dk, BV): they depend on max_seqs and the
// shape only (graph-safe: no allocation, no host synchronisation). Needs sm_80 or newer.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/delta_rule_prefill.h"

namespace sg {

// True for Dk in {32, 64, 128} and any Dv >= 1 (tiles past Dv are masked).
bool delta_rule_prefill_mma_supports(int Dk, int Dv);

// The automatic Dv tile: 128 when Dv is a multiple of 128, else 64 when a multiple of 64, else 32.
int delta_rule_prefill_mma_tile(int Dv);

// Dynamic shared memory of one block (bytes), or 0 for an unsupported (Dk, dv_tile).
size_t delta_rule_prefill_mma_smem(int Dk, int dv_tile);

// Launches the tensor-core chunked prefill. dv_tile: 0 = automatic, else 32, 64 or 128. Returns
// cudaErrorInvalidValue on an unsupported shape or tile, Hk < 1, Hv % Hk != 0, max_seqs < 0 or
// > 65535, a null pointer or a dtype other than f32/bf16; cudaSuccess without launching when
// max_seqs == 0; else the error of cudaFuncSetAttribute or of the launch. Never throws.
cudaError_t delta_rule_prefill_mma(const DeltaRulePrefillParams& p, cudaStream_t stream, int dv_tile = 0);

}  // namespace sg
