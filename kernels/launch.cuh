// launch.cuh: every kernel of this library is launched through sg::launch_kernel and starts with
// pdl_start() (or, where it can do work that reads no other kernel's output first, calls
// pdl_wait() before its first such access and pdl_trigger() after it).
//
// With PDL on (launch_policy.h) a launch may begin while the previous kernel in the stream still
// runs: the previous kernel lets it start with griddepcontrol.launch_dependents (pdl_trigger), and
// griddepcontrol.wait (pdl_wait) blocks until every grid it depends on has completed and its
// writes are visible. The rule that keeps a step byte-identical with PDL on or off: before
// pdl_wait() a kernel writes no global memory and reads only data that no other kernel of the
// current step writes. A kernel that calls pdl_wait in every block also completes only after its
// predecessor did, which keeps the order transitive down the stream. Launched without PDL, both
// instructions do nothing.
//
// What may be read before the wait, in the kernels that say so: the step metadata (slots,
// positions), weights and tables that no step writes, and state that only this op touches within
// a step (a layer's conv state in conv.update, its SSM state in the delta rule), or parts of it
// no kernel of the step writes (attention decode: a row's cached keys and values before its
// position, where attn_prep writes the position's alone). Earlier steps
// have completed by then: every step starts with its metadata upload, a copy in the same stream,
// which waits for all work before it.
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "kernels/launch_policy.h"

namespace sg {

// Blocks until the grids this one depends on have completed and their memory is visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream launch its blocks (they still wait in pdl_wait for this grid
// to complete). Issued once every block of this grid has issued it or exited.
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The start of a kernel that does nothing before reading its inputs: wait for the previous
// kernel, then let the next one start its blocks (they overlap this kernel's run, not its wait).
__device__ __forceinline__ void pdl_start() {
  pdl_wait();
  pdl_trigger();
}

// As launch_kernel, in thread block clusters of cluster_x consecutive blocks along x (0: launched
// without the cluster attribute; grid.x must be a multiple of cluster_x, at most 8 without a
// non-portable opt-in). A kernel that uses cluster barriers or distributed shared memory takes
// the attribute even for clusters of one block.
template <typename... Params, typename... Args>
cudaError_t launch_kernel_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                  unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attr[2] = {};
  unsigned n = 0;
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cluster_x > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = n;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// kernel<<<grid, block, smem, stream>>>(args...), with PDL when this thread enabled it. Returns
// the launch's error (also left for cudaGetLastError, as a <<< >>> launch leaves it).
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args&&... args) {
  return launch_kernel_cluster(kernel, grid, block, smem, stream, 0, std::forward<Args>(args)...);
}

}  // namespace sg
