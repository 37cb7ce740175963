// bench_probes.cu: the benchmark's latency-floor probes (bench_probes.h). Benchmark-only.
#include "tools/cli/bench_probes.h"

namespace sg::bench {
namespace {

__global__ void probe_empty_kernel() {}

// flip is 0 at run time: the XOR keeps the compiler from proving the store redundant (a store of
// the value just loaded from the same address may be deleted), so the store really happens.
__global__ void probe_slot_state_kernel(const int32_t* slots, uint4* state, int64_t row_words, uint32_t flip) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= row_words) return;
  const int slot = slots[blockIdx.y];
  if (slot < 0) return;
  uint4* word = state + slot * row_words + t;  // [num_slots, row_words] 16-byte words
  uint4 v = *word;
  v.x ^= flip;
  *word = v;
}

dim3 to_dim3(const Dim3& d) { return dim3(d.x, d.y, d.z); }

}  // namespace

cudaError_t probe_empty(const Dim3& grid, const Dim3& block, cudaStream_t stream) {
  probe_empty_kernel<<<to_dim3(grid), to_dim3(block), 0, stream>>>();
  return cudaGetLastError();
}

cudaError_t probe_slot_state(const int32_t* slots, void* state, int64_t row_bytes, const Dim3& grid, const Dim3& block,
                             cudaStream_t stream) {
  if (row_bytes <= 0 || row_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(state) % 16 != 0)
    return cudaErrorInvalidValue;
  probe_slot_state_kernel<<<to_dim3(grid), to_dim3(block), 0, stream>>>(slots, static_cast<uint4*>(state),
                                                                        row_bytes / 16, 0u);
  return cudaGetLastError();
}

}  // namespace sg::bench
