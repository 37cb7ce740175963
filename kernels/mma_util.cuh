// mma_util.cuh: the warp-level tensor-core and async-copy primitives the mma kernels share
// (attention_prefill_mma.cu, attention_decode_mma.cu): cp.async 16-byte copies, mma.sync
// m16n8k16 bf16 -> f32, ldmatrix, and the split of an f32 pair into bf16 parts. sm_80 or newer.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace sg::mma {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; zero-filled (no read) when !pred.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool pred) {
  const int n = pred ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// D[16x8] += A[16x16] B[16x8], bf16 inputs, f32 accumulators (fragment layouts of the PTX ISA:
// g = lane / 4, t = lane % 4; a0 (row g, cols 2t, 2t+1), a1 (row g+8), a2 (row g, cols 2t+8, +9),
// a3 (row g+8, cols 2t+8, +9); b0 (rows 2t, 2t+1, col g), b1 (rows 2t+8, +9); c0 c1 (row g, cols
// 2t, 2t+1), c2 c3 (row g+8)).
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices; lane l gives the row address of matrix l / 8, row l % 8. Thread t
// receives (row t / 4, cols 2 (t % 4), +1) of each matrix (.trans: (rows 2 (t % 4), +1, col t / 4)).
__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ uint32_t lds32(const __nv_bfloat16* p) { return *reinterpret_cast<const uint32_t*>(p); }

__device__ __forceinline__ uint32_t as_u32(__nv_bfloat162 v) {
  uint32_t u;
  static_assert(sizeof(u) == sizeof(v));
  __builtin_memcpy(&u, &v, sizeof(u));
  return u;
}

// Splits (x, y) (x the lower column) into kParts bf16x2 words whose sum approximates it: part i
// rounds what parts 0..i-1 left (the differences are exact in f32). Two parts leave at most
// 2^-16 of each value (the bound derived in attention_prefill_mma.cu).
template <int kParts>
__device__ __forceinline__ void split_pair(float x, float y, uint32_t* parts) {
#pragma unroll
  for (int i = 0; i < kParts; ++i) {
    const __nv_bfloat162 b = __floats2bfloat162_rn(x, y);
    parts[i] = as_u32(b);
    const float2 f = __bfloat1622float2(b);
    x -= f.x;
    y -= f.y;
  }
}

}  // namespace sg::mma
