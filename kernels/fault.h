// fault.h: a kernel that faults on purpose, for fault drills (ModelStepOptions::fault_op,
// `generate --fault-after`): it stores to an address no allocation can have, so the launch
// succeeds and the kernel ends with cudaErrorIllegalAddress while it runs, which makes the CUDA
// context unusable for the rest of the process. Never launched unless a drill asks for it.
#pragma once
#include <cuda_runtime_api.h>

namespace sg {

// Launches one thread that stores to an invalid device address. Returns the launch's error (none:
// the fault comes when the kernel runs).
cudaError_t fault_inject(cudaStream_t stream);

}  // namespace sg
