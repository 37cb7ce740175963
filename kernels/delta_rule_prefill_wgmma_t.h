// delta_rule_prefill_wgmma_t.h: the gated delta rule's prefill in the chunked WY form on the sm_90a
// warpgroup tensor cores, in two kernels: every chunk's T = (I + A)^-1 and P = Q K^T first, all
// chunks at once, then the recurrence with the state transposed. Params and contract of delta_rule_prefill
// (delta_rule_prefill.h); bf16 q, k, v with Dk = Dv = 128 on compute capability 9.0 only, as the
// one-kernel form (delta_rule_prefill_wgmma.h), whose products, parts and masks it computes.
//
// Why: in the one-kernel form a block walks a sequence's chunks with a third warpgroup computing
// the next chunk's T beside the two state warpgroups, and both chains are about 24,000 cycles a
// chunk (docs/BENCHMARKS.md): the state's, because the state's bf16 parts go through shared memory
// as the B operand of O = Q S and X = K S every chunk, with X and V' too; T's, because one
// warpgroup's substitutions and products are latency-bound. Here
//   1. delta_chunk_t_kernel, grid chunk records x Hv / V, 128 V threads (V = 2 v-heads a block
//      where each k head has an even number of them, else 1): one chunk of one v-head a
//      warpgroup, independent of every other (the parallelism of all chunks, not of sequences):
//      the k and q tiles (once for the block's v-heads), gates, A = K K^T and T, by the same code
//      as the one-kernel form's third
//      warpgroup (delta_rule_wgmma_chunk.cuh: T's bytes are that form's), and P = Q K^T masked as
//      its state warpgroups mask it; T's and P's bf16 parts (their lower triangles of 8 x 8 core
//      matrices: both are exact zeros above the diagonal) and the gates go to a record in the
//      workspace;
//   2. delta_rule_wgmma_t_kernel, grid (Hv, max_seqs), 256 threads: two warpgroups, each owning 64
//      value columns of the state as S^T [64 x 128] f32, the accumulator of its own update, and its
//      register A operand: X^T = S^T K^T and O^T = S^T Q^T (S^T's bf16 parts from registers),
//      V'^T = X'^T T^T, o^T = O^T + V'^T P^T (T's and P's parts from the record) and
//      S^T = exp(G_last) S^T + (L V')^T K. Nothing of the state, X or V' passes through shared
//      memory; the next chunk's q, k, v tiles and record are copied (cp.async) while a chunk runs;
//      one block barrier a chunk, and one a warpgroup for its bf16 output (o goes through a shared
//      tile to 16-byte stores of whole rows).
// The operands are split into bf16 high and low parts as in the one-kernel form (hi*hi + hi*lo +
// lo*hi; S two products, q and k being exact), accumulated in f32: each output element sums the
// same exact products in the same order as there (the products issued in its order, the
// elementwise steps the same), but transposed, with each product's operands in the other roles, and
// nothing documented says the tensor cores sum a k-step alike then. So it is a value of the
// --delta-prefill setting, tested against the double reference with the one-kernel form's
// tolerance and within 1e-5 of that form (tests/gpu/test_delta_rule_prefill_wgmma_t.cpp, which
// reports whether the bytes are equal).
// Causal also for non-finite values, as the one-kernel form: X and V' enter T X and P V' with
// non-finite values as 0, and the value columns at or past their first non-finite token are NaN
// after each product; (L V') enters the state update as it is.
//
// Workspace: one record of delta_rule_prefill_wgmma_t_record() bytes (19,712) a (chunk, v-head): chunk ci
// of sequence n is record cu_seqlens[n] / 64 + n + ci, so max_tokens tokens in at most max_seqs
// sequences use fewer than ceil(max_tokens / 64) + max_seqs records a head. The caller guarantees
// cu_seqlens[*n_seqs] <= max_tokens (the step's token bucket); a sequence whose records would fall
// past the workspace anyway gets NaN output rows and keeps its state.
// Contract otherwise delta_rule_prefill_wgmma's (padding slot < 0: zero output rows, state
// untouched; zero-length sequences touch nothing; has_history; device-side n_seqs; output rows >=
// cu_seqlens[*n_seqs] untouched; no fused norm), with q, k, v 16-byte aligned (out and state need
// only their element's alignment). Out f32 or bf16, state f32 or bf16. Deterministic. Grids from
// max_tokens, max_seqs and Hv only (graph-safe).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/delta_rule_prefill.h"

namespace sg {

// Its chunk record (delta_rule_prefill_wgmma_t_record) and workspace
// (delta_rule_prefill_wgmma_t_workspace), the dynamic shared memory of a recurrence block
// (delta_rule_prefill_wgmma_t_smem) and of a T block (delta_rule_prefill_wgmma_t_chunk_smem), and
// the v-heads of a T block (delta_rule_prefill_wgmma_t_chunk_heads): delta_rule_prefill_shapes.h.

// Launches the T kernel and the recurrence, one after the other on `stream`. Returns
// cudaErrorInvalidValue on what delta_rule_prefill_wgmma refuses, on max_tokens < 0 and on a
// workspace that is null (when one is needed), not 16-byte aligned or smaller than
// delta_rule_prefill_wgmma_t_workspace(max_tokens, max_seqs, Hv);
// cudaErrorNoKernelImageForDevice on a device other than compute capability 9.0; cudaSuccess
// without launching when max_seqs == 0; else the error of cudaFuncSetAttribute or of a launch.
// Never throws.
cudaError_t delta_rule_prefill_wgmma_t(const DeltaRulePrefillParams& p, void* workspace, size_t workspace_bytes,
                                       int max_tokens, cudaStream_t stream);

}  // namespace sg
