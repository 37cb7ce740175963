// fault.cu: the fault drill's kernel (fault.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/fault.h"

namespace sg {
namespace {

// `p` comes from the host, so the compiler cannot prove the store invalid and drop it.
__global__ void fault_kernel(int* p) { *reinterpret_cast<volatile int*>(p) = 1; }

}  // namespace

cudaError_t fault_inject(cudaStream_t stream) {
  // The first page of the address space is never mapped: the store is an illegal address.
  fault_kernel<<<1, 1, 0, stream>>>(reinterpret_cast<int*>(uintptr_t{64}));
  return cudaGetLastError();
}

}  // namespace sg
