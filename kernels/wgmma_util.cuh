// wgmma_util.cuh: the warpgroup tensor-core primitives of sm_90a (wgmma.mma_async): shared-memory
// matrix descriptors for the interleaved (unswizzled) and 128-byte swizzled layouts, the fences
// and the m64nNk16 bf16 -> f32 instructions the wgmma kernels use (attention_prefill_wgmma.cu,
// delta_rule_prefill_wgmma.cu; m64n256k16 the GEMM probe, tools/probes/gemm_wgmma.cuh). Only a
// translation unit built for sm_90a (the sg_kernels_sm90a library, kernels/CMakeLists.txt) may
// include it: the instructions exist on no other target.
//
// Layout (unswizzled, "interleaved"): a core matrix is 8 rows of 16 contiguous bytes (8 bf16),
// 128 bytes in all. A 16-element k-step of an operand is a column of core matrices; the descriptor
// names the stride between core matrices along K (the leading byte offset) and along M or N (the
// stride byte offset). The kernels store a tile of R rows x C bf16 as row groups of 8: chunk
// (row r, 16-byte column c) at byte (r / 8) * C * 16 + c * 128 + (r % 8) * 16, so a K-major
// operand (rows = M or N, columns = K) has leading offset 128 and stride offset C * 16, and an
// MN-major one (rows = K, columns = N) has leading offset C * 16 and stride offset 128.
//
// Accumulators of m64nNk16 (f32): warp w of the warpgroup holds rows 16w .. 16w + 15 in the
// layout of mma.sync m16n8k16 repeated along N: d[4j + 0, 1] = (row 16w + g, cols 8j + 2t, +1),
// d[4j + 2, 3] = (row 16w + g + 8, same cols), g = lane / 4, t = lane % 4. A register A operand
// (the RS form) is the m16n8k16 A fragment of the warp's 16 rows (mma_util.cuh).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "wgmma_util.cuh needs an sm_90a target (CUDA_ARCHITECTURES 90a)"
#endif

namespace sg::wgmma {

// Descriptor of an unswizzled operand at shared address `addr` (16-byte aligned): bits 0-13 the
// address / 16, 16-29 the leading byte offset / 16, 32-45 the stride byte offset / 16, layout
// type 0 (interleaved) in bits 62-63.
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lead_bytes, uint32_t stride_bytes) {
  return static_cast<uint64_t>((addr >> 4) & 0x3FFF) | (static_cast<uint64_t>((lead_bytes >> 4) & 0x3FFF) << 16) |
         (static_cast<uint64_t>((stride_bytes >> 4) & 0x3FFF) << 32);
}

// Descriptor of an operand stored with the 128-byte swizzle (swizzle mode 1 in bits 62-63), as a
// TMA copy of a box 128 bytes wide lands it (tma_map.h): 128-byte rows, chunk c of row r at
// c ^ (r % 8), the pattern aligned to 1024 bytes. K-major: rows are M or N, 8-row groups
// `stride_bytes` (1024) apart, the leading offset unused (the k-step's 32 bytes are added to the
// address: a 16-element k-step starts 32 bytes into the row). MN-major: rows are K (8-row groups
// `stride_bytes` apart), and 64-element blocks of M or N are `lead_bytes` apart.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr, uint32_t lead_bytes, uint32_t stride_bytes) {
  return desc(addr, lead_bytes, stride_bytes) | (uint64_t{1} << 62);
}

// Before the first wgmma that reads registers written by ordinary instructions (accumulators, A).
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written through the generic proxy (st.shared, cp.async) becomes visible to wgmma
// (the async proxy) after this fence in the writing thread and a barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving reads or writes of accumulator registers across the asynchronous
// instructions (the registers are not the instruction's operands between issue and wait).
template <int N>
__device__ __forceinline__ void fence_operands(float* r) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

// D[64 x 64] (+)= A[64 x 16] B[16 x 64]: A and B from shared memory; TA / TB 0: K-major, 1:
// MN-major (transposed); scale_d 0 overwrites D.
template <int TA, int TB>
__device__ __forceinline__ void m64n64k16_ss_t(float* d, uint64_t a, uint64_t b, int scale_d) {
  static_assert((TA == 0 || TA == 1) && (TB == 0 || TB == 1), "a transpose flag is 0 or 1");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, %35, %36;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(scale_d), "n"(TA), "n"(TB));
}

// D[64 x 32] (+)= A[64 x 16] B[16 x 32]: A and B from shared memory, both K-major; scale_d 0
// overwrites D.
__device__ __forceinline__ void m64n32k16_ss(float* d, uint64_t a, uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "r"(scale_d));
}

// D[64 x 64] (+)= A[64 x 16] B[16 x 64]: A and B from shared memory, both K-major.
__device__ __forceinline__ void m64n64k16_ss(float* d, uint64_t a, uint64_t b, int scale_d) {
  m64n64k16_ss_t<0, 0>(d, a, b, scale_d);
}

// D[64 x 64] (+)= A[64 x 16] B[16 x 64]: A from registers (a[4], the m16n8k16 A fragment of the
// warp's rows), B from shared memory, TB 0: K-major, 1: MN-major (transposed); scale_d 0
// overwrites D.
template <int TB>
__device__ __forceinline__ void m64n64k16_rs_t(float* d, const uint32_t (&a)[4], uint64_t b, int scale_d) {
  static_assert(TB == 0 || TB == 1, "a transpose flag is 0 or 1");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d), "n"(TB));
}

// D[64 x 64] += A[64 x 16] B[16 x 64]: A from registers, B from shared memory, MN-major (transposed).
__device__ __forceinline__ void m64n64k16_rs_tb(float* d, const uint32_t (&a)[4], uint64_t b) {
  m64n64k16_rs_t<1>(d, a, b, 1);
}

// D[64 x 128] += A[64 x 16] B[16 x 128]: A from registers (a[4], the m16n8k16 A fragment of the
// warp's rows), B from shared memory, MN-major (transposed).
__device__ __forceinline__ void m64n128k16_rs_tb(float* d, const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

// D[64 x 256] (+)= A[64 x 16] B[16 x 256]: A and B from shared memory, both K-major; scale_d 0
// overwrites D. d: a thread's 128 accumulators.
__device__ __forceinline__ void m64n256k16_ss(float* d, uint64_t a, uint64_t b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]),
        "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]),
        "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]),
        "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]),
        "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
        "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]),
        "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]),
        "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(scale_d));
}

// Two warpgroups taking turns to issue their products (the ping-pong schedule), on named barriers
// kBase and kBase + 1: warpgroup `me` (0 or 1) calls wait() before it issues a group of products
// and pass() after it has committed them, so that the two groups alternate on the tensor cores and
// each warpgroup's other work (a softmax, fragment conversions) runs under the other's products.
// Warpgroup 1 calls pass() once before its first wait() (warpgroup 0 goes first) and warpgroup 0
// calls wait() once after its last pass(), so that every arrival is met before the block ends.
template <int kBase>
struct Turns {
  int me;
  __device__ __forceinline__ void wait() const { asm volatile("bar.sync %0, 256;\n" ::"r"(kBase + me) : "memory"); }
  __device__ __forceinline__ void pass() const {
    asm volatile("bar.arrive %0, 256;\n" ::"r"(kBase + 1 - me) : "memory");
  }
};

}  // namespace sg::wgmma
