// embedding.cu: row gather from the embedding table, one block per token.
#include "kernels/device_util.cuh"
#include "kernels/embedding.h"
#include "kernels/launch.cuh"
#include "kernels/launch_check.h"

namespace sg {
namespace {

constexpr int kBlock = 256;

// Vector path: same dtype, row bytes a multiple of 16, table and y 16-byte aligned.
__global__ void __launch_bounds__(kBlock) embedding_vec_kernel(const EmbeddingParams p, int vec_per_row) {
  pdl_start();  // kernels/launch.cuh
  const int t = blockIdx.x;
  uint4* dst = static_cast<uint4*>(p.y) + static_cast<int64_t>(t) * vec_per_row;
  const bool live = !p.live_rows || t < *p.live_rows;
  const int64_t id = live ? p.ids[t] : -1;
  if (id < 0 || id >= p.V) {
    for (int i = threadIdx.x; i < vec_per_row; i += blockDim.x) dst[i] = make_uint4(0, 0, 0, 0);
    return;
  }
  const uint4* src = static_cast<const uint4*>(p.table) + id * vec_per_row;
  for (int i = threadIdx.x; i < vec_per_row; i += blockDim.x) dst[i] = src[i];
}

// Element path: any dtype pair (converts through f32, one rounding on a bf16 store).
__global__ void __launch_bounds__(kBlock) embedding_elem_kernel(const EmbeddingParams p) {
  pdl_start();  // kernels/launch.cuh
  const int t = blockIdx.x;
  const int64_t o0 = static_cast<int64_t>(t) * p.H;
  const bool live = !p.live_rows || t < *p.live_rows;
  const int64_t id = live ? p.ids[t] : -1;
  if (id < 0 || id >= p.V) {
    for (int i = threadIdx.x; i < p.H; i += blockDim.x) dev::store(p.y, p.y_dtype, o0 + i, 0.0f);
    return;
  }
  const int64_t s0 = id * p.H;
  for (int i = threadIdx.x; i < p.H; i += blockDim.x) dev::copy(p.y, p.y_dtype, o0 + i, p.table, p.table_dtype, s0 + i);
}

bool float_type(DType t) { return t == DType::f32 || t == DType::bf16; }

}  // namespace

cudaError_t embedding(const EmbeddingParams& p, cudaStream_t stream) {
  LaunchCheck chk("embedding");
  chk.not_null(p.table, "table").not_null(p.ids, "ids").not_null(p.y, "y");
  chk.in_range(p.V, 1, INT64_MAX, "V").in_range(p.H, 1, INT64_MAX, "H").in_range(p.T, 0, INT64_MAX, "T");
  chk.require(float_type(p.table_dtype) && float_type(p.y_dtype), "table_dtype and y_dtype must be bf16 or f32");
  if (!chk.ok()) return cudaErrorInvalidValue;
  if (p.T == 0) return cudaSuccess;
  const int64_t row_bytes = static_cast<int64_t>(p.H) * static_cast<int64_t>(dtype_size(p.table_dtype));
  const bool vec = p.table_dtype == p.y_dtype && row_bytes % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(p.table) % 16 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
  if (vec) {
    launch_kernel(embedding_vec_kernel, static_cast<unsigned>(p.T), kBlock, 0, stream, p,
                  static_cast<int>(row_bytes / 16));
  } else {
    launch_kernel(embedding_elem_kernel, static_cast<unsigned>(p.T), kBlock, 0, stream, p);
  }
  return cudaGetLastError();
}

}  // namespace sg
