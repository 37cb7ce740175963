// tma_map.h: host side of the TMA copies (tma_util.cuh is the device side): tensor maps of bf16
// arrays with the 128-byte swizzle, encoded by the driver's cuTensorMapEncodeTiled, looked up at
// run time through the runtime (nothing links libcuda). Header-only, so that both kernel
// libraries (sg_kernels and the sm_90a one) use it without depending on each other.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
#include <cuda_runtime_api.h>

#include <cstdint>

namespace sg::tma {

// The driver's tensor-map encoder, looked up once (null when the driver lacks it).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const bool ok =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess;
    return ok ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f) : nullptr;
  }();
  return fn;
}

// A bf16 array of `rank` dimensions (dims[0] innermost, contiguous; strides[i] the byte stride of
// dimension i + 1, multiples of 16) read in boxes of box[0] x .. elements, box[0] * 2 <= 128 bytes,
// landing with the 128-byte swizzle (chunk c of a 128-byte row r at c ^ (r % 8), the layout a
// wgmma descriptor of swizzle mode 1 reads when the box starts on a 1024-byte boundary).
// Elements outside dims are filled with zeros. False when the driver lacks the encoder or refuses
// the map.
inline bool encode_bf16_sw128(CUtensorMap* map, const void* base, int rank, const cuuint64_t* dims,
                              const cuuint64_t* strides, const cuuint32_t* box) {
  const auto encode = tensor_map_encoder();
  if (!encode || rank < 1 || rank > 5) return false;
  const cuuint32_t elem[5] = {1, 1, 1, 1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims,
                strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace sg::tma
