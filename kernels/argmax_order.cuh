// argmax_order.cuh: the one strict total order the greedy pick uses on (value, index) candidates
// (argmax.h, tp_argmax.h): NaN first, then the larger value, then the lower index. Any reduction
// order under it picks the same element.
#pragma once

namespace sg {

// True when candidate (av, ai) beats (bv, bi).
__device__ __forceinline__ bool argmax_beats(float av, int ai, float bv, int bi) {
  const bool an = isnan(av), bn = isnan(bv);
  if (an != bn) return an;
  if (!an && av != bv) return av > bv;
  return ai < bi;
}

}  // namespace sg
