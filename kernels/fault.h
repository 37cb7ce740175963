// fault.h: a kernel that faults on purpose, for fault drills (ModelStepOptions::fault_op,
// `generate --fault-after`): it stores to an address no allocation can have, so the launch
// succeeds and the kernel ends with cudaErrorIllegalAddress while it runs, which makes the CUDA
// context unusable for the rest of the process. Never launched unless a drill asks for it.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sg {

// Launches one thread that stores to an invalid device address. Returns the launch's error (none:
// the fault comes when the kernel runs). With `runs` (a device counter the caller zeroed), each run
// of the kernel counts itself there and only the run numbered `at` or later (from 1) faults; the
// earlier ones do nothing, so a drill can fault deep into a run (the replays of the marginal costs,
// a soak's later periods). Without `runs` every run faults.
cudaError_t fault_inject(cudaStream_t stream, unsigned long long* runs = nullptr, uint64_t at = 1);

}  // namespace sg
