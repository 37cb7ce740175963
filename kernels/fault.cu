// fault.cu: the fault drill's kernel (fault.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fault.h"
#include "kernels/launch.cuh"

namespace sg {
namespace {

// `p` comes from the host, so the compiler cannot prove the store invalid and drop it. It waits
// for the node before it (kernels/launch.cuh), so the fault comes after that node's work.
__global__ void fault_kernel(int* p, unsigned long long* runs, unsigned long long at) {
  pdl_start();
  if (runs != nullptr && atomicAdd(runs, 1ull) + 1ull < at) return;  // an earlier run than the drill's
  *reinterpret_cast<volatile int*>(p) = 1;
}

}  // namespace

cudaError_t fault_inject(cudaStream_t stream, unsigned long long* runs, uint64_t at) {
  // The first page of the address space is never mapped: the store is an illegal address.
  launch_kernel(fault_kernel, dim3(1), dim3(1), 0, stream, reinterpret_cast<int*>(uintptr_t{64}), runs,
                static_cast<unsigned long long>(at));
  return cudaGetLastError();
}

}  // namespace sg
