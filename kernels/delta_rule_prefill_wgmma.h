// delta_rule_prefill_wgmma.h: the gated delta rule's prefill over a packed varlen batch in the
// chunked WY form (docs/MODEL.md step 4) on the sm_90a WARPGROUP tensor cores (wgmma), with the
// params struct and contract of delta_rule_prefill (delta_rule_prefill.h). Built for bf16 q, k, v
// with Dk = Dv = 128 (the Qwen3.5 presets' GDN heads) on compute capability 9.0 only.
//
// The arithmetic is the mma kernel's (delta_rule_prefill_mma.h): chunks of 64 tokens, the same
// gates, masks and products
//   P, A = [q; k] K^T (lower triangle)    O, X = [q; k] S    T = (I + A)^-1 (CUDA cores, blockwise)
//   V' = T X     o = O + P V'     S = exp(G_last) S + K^T (exp(G_last - G) V')
// with q and k exactly bf16 (one part) and every other operand (S, T, X, P, V') split into a high
// and a low bf16 part, multiplied as hi*hi + hi*lo + lo*hi (S: two products, q and k being exact),
// accumulated in f32. The accumulation order of wgmma is not that of mma.sync, and the inverse is
// taken from 16 x 16 blocks (the mma kernel's from 32 x 32), so the bytes are not the mma kernel's:
// a value of the --delta-prefill setting (`wgmma`), not an arm, tested against the double reference
// with the mma kernel's tolerance (tests/gpu/test_delta_rule_prefill_wgmma.cpp).
//
// Why: the mma kernel reads every fragment of S, X and V' from shared memory into registers once
// per warp and splits it there; 19 other instructions per HMMA keep its issue slots busy (ncu). A
// wgmma reads its shared-memory operands once for 64 rows with no register copies, and the state
// lives in registers for the whole sequence as the accumulator of its own update.
//
// Block: 384 threads, three warpgroups. Warpgroups 0 and 1 run the state's products: warpgroup w
// owns value columns 64w .. 64w + 63 of O, X, V', the output and the state (S[:, 64w ..], 128 x 64
// f32 accumulators in registers), and computes P itself (its register A operand of P V').
// Warpgroup 2 works one chunk ahead: it copies the chunk's k tile, computes its gates, A = K K^T
// and T = (I + A)^-1 (then T's bf16 parts over its f32 tile, the shared-memory A operand of
// V' = T X) into the other of two buffers and signals it ready (named barriers; the state
// warpgroups release a buffer when their update has read it). setmaxnreg gives warpgroups 0 and 1
// 200 registers and warpgroup 2 104. Shared memory (delta_rule_prefill_wgmma_smem(), 202,240 bytes):
// q and v, and k in two buffers, as bf16 core-matrix tiles (the next chunk's q and v are copied by
// cp.async while the current chunk's products run), each warpgroup's S and X / V' as bf16 high and
// low part tiles (exp(G_last - G) V' inside S's region while S is not needed), two A / T tiles
// (f32, then T's parts) and two sets of gates.
// Measured on the H200 (docs/BENCHMARKS.md, the 4B's prefill of 32 x 1024 tokens): 2.17 ms a
// launch against the mma kernel's 2.89. A block's chunk takes about 30,000 cycles, and warpgroup
// 2's chain (gates, A, inverse, T's parts) about as long as the state warpgroups'. Either chain
// alone (the other's work removed) took about 24,000 when measured: each slows the other
// (tools/probes/delta_prefill_probe.cu's timeline).
// `auto` picks this form for bf16 steps where it runs (models/step_settings.h).
//
// Causal also for non-finite values: X and V' are stored with non-finite values replaced by 0 in
// the operands of T X and P V' (which multiply every row by every token's values, and a later
// token's NaN times the exact 0 above the diagonal would be NaN), and the rows at or past a column's
// first non-finite value are made NaN after the product, as the plain product would be; P, A and T
// above the diagonal are selected away. So a NaN or Inf in one token's inputs reaches no earlier
// token's output (as in the scan).
//
// Contract: delta_rule_prefill_mma's (padding slot < 0: zero output rows, state untouched;
// zero-length sequences touch nothing; has_history; device-side n_seqs; output rows >=
// cu_seqlens[*n_seqs] untouched; the block (hv, n) is the only one touching state[slot][hv]),
// without the fused output norm (norm_w is refused) and with q, k, v, out and state 16-byte
// aligned (refused otherwise: the tiles are copied by 16-byte cp.async). Out f32 or bf16, state
// f32 or bf16. Deterministic (fixed order). Grid (Hv, max_seqs), block 384, dynamic shared memory
// delta_rule_prefill_wgmma_smem(): from max_seqs and the shape only (graph-safe).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/delta_rule_prefill.h"

namespace sg {

// Its shapes (delta_rule_prefill_wgmma_supports: Dk = Dv = 128, bf16 q, k, v), devices
// (delta_rule_prefill_wgmma_device: compute capability 9.0) and dynamic shared memory a block
// (delta_rule_prefill_wgmma_smem): delta_rule_prefill_shapes.h.

// Launches the warpgroup chunked prefill. Returns cudaErrorInvalidValue on an unsupported shape or
// dtype, misaligned buffers, a fused norm, Hk < 1, Hv % Hk != 0, max_seqs < 0 or > 65535 or a null
// pointer; cudaErrorNoKernelImageForDevice on a device other than compute capability 9.0;
// cudaSuccess without launching when max_seqs == 0; else the error of cudaFuncSetAttribute or of
// the launch. Never throws.
cudaError_t delta_rule_prefill_wgmma(const DeltaRulePrefillParams& p, cudaStream_t stream);

}  // namespace sg
