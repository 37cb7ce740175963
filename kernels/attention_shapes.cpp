// attention_shapes.cpp: see attention_shapes.h. Pure integer logic, no CUDA.
#include "kernels/attention_shapes.h"

#include <algorithm>

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

bool attention_prefill_wgmma_supports(int D, DType q_dtype, DType cache_dtype) {
  return attention_prefill_wgmma_smem(D) > 0 && q_dtype == DType::bf16 && cache_dtype == DType::bf16;
}

bool attention_decode_mma_supports(int Hq, int Hkv, int D, DType q_dtype, DType cache_dtype) {
  return attention_supports(Hq, Hkv, D, cache_dtype) && attention_decode_mma_smem(D) > 0 && Hq / Hkv <= 8 &&
         q_dtype == DType::bf16 && cache_dtype == DType::bf16;
}

int attention_decode_pick_splits(int T, int Hq, int Hkv, int max_context, int num_sms) {
  if (T <= 0 || Hkv <= 0 || Hq <= 0) return 1;
  const int group = Hq / Hkv;
  const long blocks = static_cast<long>(T) * Hkv * ((group + kAttentionDecodeMaxGroup - 1) / kAttentionDecodeMaxGroup);
  const long want = 4L * std::max(num_sms, 1);
  long s = (want + blocks - 1) / blocks;
  s = std::min<long>(s, std::max(1, max_context / 64));
  return static_cast<int>(std::clamp<long>(s, 1, 32));
}

int attention_decode_mma_pick_splits(int T, int Hkv, int max_context, int num_sms, int blocks_per_sm) {
  if (T <= 0 || Hkv <= 0) return 1;
  const long pairs = static_cast<long>(T) * Hkv;
  const long wave = static_cast<long>(std::max(num_sms, 1)) * std::max(blocks_per_sm, 1);
  const int most = std::clamp(max_context / 64, 1, 64);
  // A step's time ~ waves x (positions per split + a fixed cost per block, about 64 positions'
  // worth: the first loads' latency and the merge).
  auto cost = [&](int s) {
    return static_cast<double>((pairs * s + wave - 1) / wave) * (double(max_context) / s + 64.0);
  };
  double best = cost(1);
  for (int s = 2; s <= most; ++s) best = std::min(best, cost(s));
  for (int s = 1; s <= most; ++s) {
    if (cost(s) <= best * 1.03) return s;
  }
  return 1;
}

}  // namespace sg
