// tma_util.cuh: sm_90 tensor-memory-accelerator (TMA) copies and the shared-memory mbarriers they
// complete on, as the producer/consumer kernels use them (skinny_gemm.cu): a producer arms a
// stage's "full" barrier with the bytes it expects and issues the copies; consumers wait on its
// phase parity, use the stage, and arrive on its "empty" barrier; the producer waits on that and
// fences the consumers' reads against its copies (release_reads) before it refills the stage.
// Barrier and shared addresses are 32-bit shared-window addresses (mma::smem_addr).
#pragma once
#include <cuda.h>  // CUtensorMap (a type only: the encoder comes from the driver at run time)

#include <cstdint>

namespace sg::tma {

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the copy engine (before the block's first barrier).
__device__ __forceinline__ void mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `bytes` of copies to complete on this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// The cross-proxy fence between a stage's reads by the consumers (generic proxy: ldmatrix,
// ld.shared) and the copy that refills it (async proxy: PTX asks for a proxy fence where memory
// passes between the two). The producer calls it after its wait on the stage's "empty" barrier,
// which acquired every consumer warp's arrival made after that warp's reads, and before it
// requests the copy. Without it the skinny GEMM, run beside another TMA GEMM on a second stream,
// gave wrong split partials in 13 to 25 of 3000 launches: single W rows of a stage refilled while a
// warp's reads of them were still outstanding (tests_gpu "[stress]"; the same fence in every
// consumer lane before its arrival also cured it but cost about 2% of the kernel's time,
// docs/BENCHMARKS.md).
__device__ __forceinline__ void release_reads() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Returns once the phase with this parity (0 or 1) has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// The box of a 2-D tensor map at element coordinates (c0 inner, c1 outer) -> shared `dst`,
// completing on `bar`; out-of-bounds elements are filled with zeros and still count as bytes.
// `map` must live in kernel parameter (__grid_constant__), constant or global memory.
__device__ __forceinline__ void load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// The same for a 3-D map (coordinates c0 innermost) and a 4-D one.
__device__ __forceinline__ void load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
      "[%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void load_4d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                        uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

}  // namespace sg::tma
