// bench_probes.h: two probe kernels that exist only for `stepgraph kernels` (the latency floor
// printed beside the conv.update arms of a decode shape); no op and no model step uses them.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/contracts.h"

namespace sg::bench {

// An empty kernel on (grid, block): what a graph node of that grid costs with no memory traffic.
cudaError_t probe_empty(const Dim3& grid, const Dim3& block, cudaStream_t stream);

// The least any slot-indexed decode update must do, on (grid, block) with grid.y = rows: thread t
// of row r (t = blockIdx.x * blockDim.x + threadIdx.x, only t < row_bytes / 16) reads slots[r],
// then one 16-byte word (word t) of that slot's state row, and stores it back unchanged: two
// dependent global round trips and a store. Padding rows (slot < 0) stop after the slot.
// slots: [rows] device int32; state: [num_slots, row_bytes] bytes, base 16-byte aligned.
// Returns cudaErrorInvalidValue when row_bytes is not a positive multiple of 16 or the base is not
// aligned, else the launch error (cudaGetLastError).
cudaError_t probe_slot_state(const int32_t* slots, void* state, int64_t row_bytes, const Dim3& grid, const Dim3& block,
                             cudaStream_t stream);

}  // namespace sg::bench
