// attention_decode_mma.h: attention_decode (attention.h) on the tensor cores, for a bf16 cache and
// bf16 q / gate with D in {64, 128, 256} and at most 8 query heads per kv head
// (attention_decode_mma_supports, attention_shapes.h). Same contract as attention_decode (one row
// per sequence, slot-indexed cache, GQA, split-K over the context into the same workspace layout
// and the same merge kernel when splits > 1, padding rows zero, live counts read on the device,
// graph-safe), NOT the same bytes: q K^T and P V run as bf16 mma.sync with f32 accumulation, P
// split into two bf16 halves (the error bound of attention_prefill_mma.cu applies; within the
// bf16 output tolerance of the attention tests). A setting of the model step
// (ModelStepOptions::attn_decode), not an arm. Pick its split count with
// attention_decode_mma_pick_splits (attention_shapes.h); every count is correct.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/attention.h"

namespace sg {

// Returns cudaErrorInvalidValue on an unsupported shape or dtype (attention_decode_mma_supports),
// max_context <= 0, splits outside 1..1024 (or > 1 without a workspace), a null pointer, T or
// Hkv past the grid's limits, or q / gate / k_cache / v_cache not 16-byte aligned; cudaSuccess
// without launching when T == 0; else the error of cudaFuncSetAttribute (dynamic shared memory
// above 48 KB) or of the launch.
cudaError_t attention_decode_mma(const AttentionParams& p, cudaStream_t stream);

// attention_decode_mma_blocks_per_sm (blocks an SM holds, for the split pick): attention_shapes.h.

}  // namespace sg
