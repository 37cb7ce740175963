// gpu_buffers.h: device buffers for GPU tests: upload typed host data (f32 values stored as f32 or
// bf16), fill with a poison byte, download raw bytes or f32 values, and compare bytes with a
// report of the mismatch count and the first mismatching element.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "kernels/numeric.h"

namespace sg::test {

class DevBuf {
 public:
  DevBuf() = default;
  explicit DevBuf(size_t bytes, uint8_t poison = 0xA5);  // filled with `poison`
  // Values stored as `t` (f32 or bf16, rounded to nearest even) in a new buffer.
  static DevBuf from(const std::vector<float>& values, DType t);
  static DevBuf from_i32(const std::vector<int32_t>& values);
  static DevBuf from_bytes(const std::vector<uint8_t>& bytes);
  void* data() const { return buf_.data(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(buf_.data());
  }
  size_t bytes() const { return buf_.bytes(); }
  void fill(uint8_t byte);
  std::vector<uint8_t> download() const;
  std::vector<float> download_f32(DType t) const;  // interprets the buffer as `t` (f32 or bf16)

 private:
  DeviceBuffer buf_;
};

// Host-side conversions matching DevBuf's storage.
std::vector<uint8_t> to_bytes(const std::vector<float>& values, DType t);
std::vector<float> from_bytes(const std::vector<uint8_t>& bytes, DType t);
// The bf16 bytes of f32 bytes rounded to nearest even (what a bf16 SSM state must hold).
std::vector<uint8_t> rounded_to_bf16(const std::vector<uint8_t>& f32_bytes);
// One bf16 ulp of x (8 significant bits): 2^(exponent - 7); the smallest normal's for 0.
double bf16_ulp(double x);

// Compares raw bytes; returns "" when identical, else "N of M elements differ; first at element i:
// got .. expected .." (elements of `elem_bytes` bytes, values shown as `t`).
std::string byte_diff(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType t);

}  // namespace sg::test
