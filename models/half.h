// half.h: IEEE 754 binary16 (f16) -> f32 on the host, exact for every input: zeros, subnormals
// (value = mantissa * 2^-24), normals, infinities and NaNs (payload kept, so a NaN stays a NaN).
#pragma once
#include <cstdint>
#include <cstring>

namespace sg {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf (mant 0) or NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: mant * 2^-24. Shift the leading 1 up to bit 10 (the implicit bit); each shift
    // lowers the exponent by one from that of the smallest normal, 2^-14 (f32 field 113).
    uint32_t e = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace sg
