// attention_prefill_mma.h: attention_prefill (attention.h) on the tensor cores, for a bf16 cache
// and bf16 q / gate with D in {32, 64, 128, 256} (attention_prefill_mma_supports, in
// attention_shapes.h). Same contract as attention_prefill (slot-indexed cache, token metadata,
// causal over the slot's positions 0..positions[t], GQA, padding rows zero, live count read on the
// device, graph-safe), NOT the same bytes: S = q k^T and P V run as bf16 mma.sync with f32
// accumulation, P split into two bf16 halves (attention_prefill_mma.cu derives the error bound;
// within the bf16 output tolerance of the attention tests). A setting of the model step
// (ModelStepOptions::attn_prefill), not an arm.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/attention.h"

namespace sg {

// Returns cudaErrorInvalidValue on an unsupported shape or dtype (attention_prefill_mma_supports),
// Hq % Hkv != 0, max_context <= 0, a null pointer or q / gate / k_cache / v_cache not 16-byte
// aligned, or `buffers` not 0, 1 or 2; cudaSuccess without launching when T == 0; else the error
// of the device query, of cudaFuncSetAttribute (dynamic shared memory above 48 KB) or of the
// launch. p.splits and p.workspace are ignored. `buffers`: the K and V tiles' buffers, 2 (the next
// key tile's copies in flight during this tile's products) or 1 (the same bytes, slower); 0 picks
// 2 where two blocks of attention_prefill_mma_smem(D, 2) bytes fit an SM of the current device
// (sm_90), else 1 (at D = 256: sm_80 would hold one block, sm_86 / sm_89 none).
cudaError_t attention_prefill_mma(const AttentionParams& p, cudaStream_t stream, int buffers = 0);

}  // namespace sg
