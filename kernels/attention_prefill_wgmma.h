// attention_prefill_wgmma.h: attention_prefill (attention.h) on the sm_90a warpgroup tensor cores
// (wgmma), for a bf16 cache and bf16 q / gate with D in {64, 128, 256}
// (attention_prefill_wgmma_supports, in attention_shapes.h), on devices of compute capability 9.0
// only (the kernel is built for sm_90a alone). The contract of attention_prefill_mma.h (slot-indexed
// cache, token metadata, causal, GQA, padding rows zero, live count read on the device, sequences
// isolated, graph-safe) and its error bound (P split into two bf16 halves); the mma kernel's bytes
// at D 64 and 128, not at 256 (where mma takes 32-key tiles). A setting of the model step
// (ModelStepOptions::attn_prefill, `auto` where it runs), not an arm.
#pragma once
#include <cuda_runtime_api.h>

#include "kernels/attention.h"

namespace sg {

// Returns cudaErrorInvalidValue on an unsupported shape or dtype (attention_prefill_wgmma_supports),
// Hq % Hkv != 0, max_context <= 0, a null pointer or q / gate / k_cache / v_cache not 16-byte
// aligned; cudaErrorNoKernelImageForDevice on a device other than compute capability 9.0;
// cudaSuccess without launching when T == 0; else the error of cudaFuncSetAttribute or the launch.
// p.splits and p.workspace are ignored.
cudaError_t attention_prefill_wgmma(const AttentionParams& p, cudaStream_t stream);

}  // namespace sg
