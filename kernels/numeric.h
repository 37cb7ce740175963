// numeric.h: the leaf of the tree. Element types, host-side bf16 <-> f32 conversion (round to nearest even) and
// the sm_90a device predicate, shared by the CPU reference ops, the engine's tensors, the kernels' launchers and
// the tests. No CUDA, no dependencies.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace sg {

// True for the devices the sg_kernels_sm90a library's images run on (its wgmma kernels are built
// for sm_90a alone): compute capability 9.0 exactly. Here, in the leaf, so that the kernels' host
// predicates and the launchers' device check (dev::require_sm90a) share it.
constexpr bool sm90a_device(int cc_major, int cc_minor) { return cc_major == 9 && cc_minor == 0; }

// Element types of tensors. Defined here, in the leaf, so kernel params structs can name them.
enum class DType : uint8_t { f32, bf16, f16, i32, i8 };

constexpr size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i8: return 1;
  }
  return 0;
}

// bf16 stored as its raw 16 bits on the host.
struct bf16_t {
  uint16_t bits = 0;
};

inline float bf16_to_f32(bf16_t v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest, ties to even; NaN stays a (quiet) NaN, infinities stay infinities.
inline bf16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) {
    return bf16_t{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return bf16_t{static_cast<uint16_t>(u >> 16)};
}

// f32 -> bf16 -> f32: what a value looks like after being stored as bf16.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

}  // namespace sg
