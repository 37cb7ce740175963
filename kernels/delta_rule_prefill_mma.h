// delta_rule_prefill_mma.h: the gated delta rule's prefill over a packed varlen batch in the
// chunked WY form (docs/MODEL.md step 4) with its large products on the TENSOR CORES (mma.sync
// m16n8k16 bf16 -> f32), with the params struct and contract of delta_rule_prefill
// (delta_rule_prefill.h). It follows delta_rule_prefill_chunked.h phase by phase (same chunk of 64
// tokens, same grid, the f32 state tile resident in shared memory for the whole sequence (a bf16 state
// widened on the read and rounded on the write, as there), T = (I + A)^-1
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
// Accuracy (tests/gpu/test_delta_rule_prefill_mma.cpp, delta_rule_ref.h): normalised error against
// ref::delta_rule_prefill_chunked (double) <= 1e-4 for f32 outputs (per sequence) and the final state
// (per slot); measured worst over the test matrix (lengths up to 1024, with and without history,
// Dk 32..128, every Dv tile, f32 and bf16 inputs): outputs 1.8e-5, state 5.7e-6; with fast decay
// (g in [-20, -5]) 1.2e-5 and 5.4e-6 (the chunked CUDA-core kernel's bound is 1e-5). bf16 outputs:
// the chunked kernel's bounds (2 bf16 ulp + 1e-4 per element, 8e-3 normalised).
//
// Layout (warps w = 0 .. BV/8 - 1): P1a spreads the 40 lower-triangle 16 x 8 tiles of P and A over
// the warps; P1b gives warp w the state columns 8w .. 8w+7 for all 128 rows of [q; k] (so each
// fragment of S is read and split once per block; f32 q, k take a second pass for their low part);
// P3 and P4's P V' give warp w row tile w / (NW / 4) (rows of one scheduler differ, so the
// triangular work is spread) and 32 columns; the state update gives warp w the columns 8w .. 8w+7
// over all Dk rows, with K^T (exactly bf16 for bf16 inputs) as the A operand. P0 issues all its
// loads before its stores and prefetches the next chunk's rows into L2.
// Shared memory (f32 tiles, and q, k as bf16 tiles for bf16 inputs; q, k rows padded to Dk + 8
// elements and S, X, V', O rows to BV + 4 words so that the fragment loads are conflict-free):
// 226,560 bytes for Dk = Dv = 128 (BV = 128) with bf16 inputs (X and V' also as bf16 high and low
// part tiles, read by ldmatrix.trans), 210,176 with f32; 87,296 / 92,416 for
// (32, 64). ptxas -v (sm_90, CUDA 13): BV = 128: 128 registers (the 512-thread bound), 24 bytes of
// spill at Dk = 128; BV = 64 and 32: 255, no spills.
// Speed (H200, the 4B prefill of 32 x 1024 tokens, 24 GDN layers, bench --phase prefill): with bf16
// q, k fragments by ldmatrix, delta_rule.prefill 80.2 ms against 103.1 ms for the f32-tile fragments
// (same machine, builds run alternately) and 144.4 ms for the chunked CUDA-core kernel. ncu (one
// layer, before the ldmatrix change): 1.35 G instructions, issue slots 37% busy, 0.58 eligible
// warps per scheduler (16 warps an SM, one block); samples: [q; k] K^T and [q; k] S 32%, P V' and
// the state update 26%, the loads of a chunk 13% (global latency), the inverse 17% (barrier waits
// while two warps substitute); 19 other instructions per HMMA (fragment loads, bf16 conversions,
// branches on the input dtype).
//
// Fused output norm (DeltaRulePrefillParams::norm_w; bf16 q, k, v and out, Dv 64 or 128 in one Dv
// tile, 16-byte aligned out, z and w): P4 keeps the chunk's bf16 output in the T tile, which is
// free from P4 to the next chunk's P1, and after the chunk's last barrier the block norms those
// rows with z and w as gated_rmsnorm's 16-byte kernel does (kernels/delta_rule_gated_out.cuh: R =
// Dv / 8 lanes a row, the same fmaf chain and butterfly), so the output holds the bytes of this
// kernel followed by that norm; z rows are requested into L2 a chunk ahead with q, k and v. A
// padding sequence's rows are the norm of zeros; one more row of blocks (grid y max_seqs + 1)
// zeroes rows norm_live .. norm_rows - 1. ptxas -v (sm_90, CUDA 13): Dk = Dv = 128, 128 registers,
// 8 bytes of spill (none without the norm). Not yet measured against the norm kernel.
//
// Contract: exactly delta_rule_prefill_chunked's (padding slot < 0: zero output rows, state
// untouched; zero-length sequences touch nothing; has_history; device-side n_seqs; programs
// n >= *n_seqs exit before reading metadata; output rows >= cu_seqlens[*n_seqs] untouched; the block
// (tile, hv, n) is the only one touching state[slot][hv][:, tile columns]). p.split is ignored.
// Deterministic (mma.sync and a fixed order). Grid (ceil(Dv / BV) * Hv, max_seqs), block 4 * BV
// threads, dynamic shared memory delta_rule_prefill_mma_smem(Dk, BV, qkv dtype): they depend on max_seqs and the
// shape only (graph-safe: no allocation, no host synchronisation). Needs sm_80 or newer.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/delta_rule_prefill.h"

namespace sg {

// Its shapes (delta_rule_prefill_mma_supports: Dk in {32, 64, 128}, any Dv >= 1), automatic Dv tile
// (delta_rule_prefill_mma_tile), dynamic shared memory a block (delta_rule_prefill_mma_smem) and
// where the fused norm is built (delta_rule_prefill_mma_norm_built): delta_rule_prefill_shapes.h.

// Launches the tensor-core chunked prefill. dv_tile: 0 = automatic, else 32, 64 or 128. Returns
// cudaErrorInvalidValue on an unsupported shape or tile, Hk < 1, Hv % Hk != 0, max_seqs < 0 or
// > 65535, a null pointer or a dtype other than f32/bf16; cudaSuccess without launching when
// max_seqs == 0; else the error of cudaFuncSetAttribute or of the launch. Never throws.
cudaError_t delta_rule_prefill_mma(const DeltaRulePrefillParams& p, cudaStream_t stream, int dv_tile = 0);

}  // namespace sg
