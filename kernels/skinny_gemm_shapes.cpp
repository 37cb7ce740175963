// skinny_gemm_shapes.cpp: the skinny GEMM's shape logic (skinny_gemm_shapes.h).
#include "kernels/skinny_gemm_shapes.h"

#include <algorithm>

namespace sg {

bool skinny_gemm_supports(int M, int N, int K) {
  return M >= 1 && M <= kSkinnyGemmMaxRows && N >= 1 && K >= kSkinnyGemmTileK && K % kSkinnyGemmTileK == 0;
}

int skinny_gemm_block_rows(int M, int N, int num_sms) {
  if (M <= 16 || N < 1) return kSkinnyGemmNarrowRows;
  const long sms = std::max(num_sms, 1), rb256 = (N + 255) / 256, rb128 = (N + 127) / 128;
  if (2 * rb256 >= sms && rb256 <= sms) return 256;      // one wave, one block an SM
  if (2 * rb128 >= sms && rb128 <= 2 * sms) return 128;  // one wave, two blocks an SM
  const long rb272 = (N + 271) / 272;
  if (2 * rb272 >= sms && rb272 <= sms) return kSkinnyGemmOneWaveRows;  // one wave where 256 need two
  return kSkinnyGemmNarrowRows;
}

int skinny_gemm_pick_splits(int M, int N, int K, int num_sms) {
  if (N <= 0 || K < kSkinnyGemmTileK) return 1;
  const int bn = skinny_gemm_block_rows(M, N, num_sms);
  const long rb = (N + bn - 1) / bn, KT = K / kSkinnyGemmTileK, sms = std::max(num_sms, 1);
  // As many row blocks as SMs, or the wide row blocks (72-144 of them at N = 10240 .. 18432): no
  // split (measured fastest, K = 2560; a split adds the partials' traffic and the last block's sum).
  if (rb >= sms || bn > kSkinnyGemmNarrowRows) return 1;
  const int most = static_cast<int>(std::clamp<long>(KT / 4, 1, 32));
  // Two blocks fit an SM (8 stages each, skinny_gemm.cu); an SM streams at full speed from two resident
  // blocks on: time ~ blocks per SM x (tiles per split + 4) / min(blocks per SM, 2).
  auto cost = [&](int s) {
    const long b = (rb * s + sms - 1) / sms;
    return static_cast<double>(b) * static_cast<double>((KT + s - 1) / s + 4) /
           static_cast<double>(std::min<long>(b, 2));
  };
  double best = cost(1);
  for (int s = 2; s <= most; ++s) best = std::min(best, cost(s));
  for (int s = 1; s <= most; ++s) {
    if (cost(s) <= best * 1.03) return s;
  }
  return 1;
}

size_t skinny_gemm_workspace_bytes(int M, int N, int splits) {
  return splits > 1 && M > 0 && N > 0 ? static_cast<size_t>(splits) * M * N * sizeof(float) : 0;
}

}  // namespace sg
