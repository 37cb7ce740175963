// fill.h: deterministic pseudo-random fills on the GPU (counter-based: element i's value depends
// only on (seed, i), so any size fills in one pass and any machine gets the same numbers).
// Used for synthetic weights and benchmark inputs; values are rounded once to the buffer's dtype.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/numeric.h"

namespace sg {

// p[i] = lo + (hi - lo) * u(seed, i), u uniform in [0, 1). dtype f32 or bf16.
cudaError_t fill_uniform(void* p, DType dtype, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);
// The same value on the host (for tests and CPU references).
float uniform_at(uint64_t seed, int64_t i, float lo, float hi);

}  // namespace sg
