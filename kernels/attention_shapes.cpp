// attention_shapes.cpp: see attention_shapes.h. Pure integer logic, no CUDA.
#include "kernels/attention_shapes.h"

namespace sg {


bool attention_supports(int Hq, int Hkv, int D, DType cache_dtype) {
  return Hq > 0 && Hkv > 0 && Hq % Hkv == 0 && D >= 1 && D <= kAttentionMaxD &&
         (cache_dtype == DType::bf16 || cache_dtype == DType::f32);
}

bool attention_supports(int Hq, int Hkv, int D) { return attention_supports(Hq, Hkv, D, DType::bf16); }

size_t attention_decode_workspace_bytes(int T, int Hq, int D, int splits) {
  if (splits <= 1 || T <= 0 || Hq <= 0 || D <= 0) return 0;
  return static_cast<size_t>(T) * Hq * splits * (D + 2) * sizeof(float);
}

bool attention_prefill_mma_supports(int D, DType q_dtype, DType cache_dtype) {
  return attention_tuned_head_dim(D) && q_dtype == DType::bf16 && cache_dtype == DType::bf16;
}

}  // namespace sg
