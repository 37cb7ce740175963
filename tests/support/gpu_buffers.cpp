// gpu_buffers.cpp: see gpu_buffers.h.
#include "tests/support/gpu_buffers.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "engine/error.h"

namespace sg::test {

DevBuf::DevBuf(size_t bytes, uint8_t poison) : buf_(bytes) { fill(poison); }

DevBuf DevBuf::from_bytes(const std::vector<uint8_t>& bytes) {
  DevBuf b(bytes.size());
  if (!bytes.empty()) check(cudaMemcpy(b.data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  return b;
}

DevBuf DevBuf::from(const std::vector<float>& values, DType t) { return from_bytes(to_bytes(values, t)); }

DevBuf DevBuf::from_i32(const std::vector<int32_t>& values) {
  std::vector<uint8_t> bytes(values.size() * 4);
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return from_bytes(bytes);
}

void DevBuf::fill(uint8_t byte) {
  if (bytes()) check(cudaMemset(data(), byte, bytes()));
}

std::vector<uint8_t> DevBuf::download() const {
  std::vector<uint8_t> out(bytes());
  check(cudaDeviceSynchronize());
  if (!out.empty()) check(cudaMemcpy(out.data(), data(), out.size(), cudaMemcpyDeviceToHost));
  return out;
}

std::vector<float> DevBuf::download_f32(DType t) const { return test::from_bytes(download(), t); }

std::vector<uint8_t> to_bytes(const std::vector<float>& values, DType t) {
  require(t == DType::f32 || t == DType::bf16, "to_bytes: f32 or bf16 only");
  std::vector<uint8_t> out(values.size() * dtype_size(t));
  for (size_t i = 0; i < values.size(); ++i) {
    if (t == DType::f32) {
      std::memcpy(out.data() + 4 * i, &values[i], 4);
    } else {
      bf16_t b = f32_to_bf16(values[i]);
      std::memcpy(out.data() + 2 * i, &b.bits, 2);
    }
  }
  return out;
}

std::vector<float> from_bytes(const std::vector<uint8_t>& bytes, DType t) {
  require(t == DType::f32 || t == DType::bf16, "from_bytes: f32 or bf16 only");
  const size_t es = dtype_size(t);
  std::vector<float> out(bytes.size() / es);
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == DType::f32) {
      std::memcpy(&out[i], bytes.data() + 4 * i, 4);
    } else {
      bf16_t b;
      std::memcpy(&b.bits, bytes.data() + 2 * i, 2);
      out[i] = bf16_to_f32(b);
    }
  }
  return out;
}

std::string byte_diff(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, DType t) {
  if (got.size() != want.size()) return fmt::format("sizes differ: got {} bytes, expected {}", got.size(), want.size());
  const size_t es = dtype_size(t);
  size_t n = 0, first = SIZE_MAX;
  for (size_t e = 0; e < got.size() / es; ++e) {
    if (std::memcmp(got.data() + e * es, want.data() + e * es, es) != 0) {
      ++n;
      if (first == SIZE_MAX) first = e;
    }
  }
  if (n == 0) return "";
  std::vector<uint8_t> g(got.begin() + first * es, got.begin() + (first + 1) * es);
  std::vector<uint8_t> w(want.begin() + first * es, want.begin() + (first + 1) * es);
  float gv = (t == DType::f32 || t == DType::bf16) ? from_bytes(g, t)[0] : 0.f;
  float wv = (t == DType::f32 || t == DType::bf16) ? from_bytes(w, t)[0] : 0.f;
  return fmt::format("{} of {} elements differ; first at element {}: got {:.9g}, expected {:.9g}", n, got.size() / es,
                     first, gv, wv);
}

std::vector<uint8_t> rounded_to_bf16(const std::vector<uint8_t>& f32_bytes) {
  return to_bytes(from_bytes(f32_bytes, DType::f32), DType::bf16);
}

double bf16_ulp(double x) { return x == 0.0 ? std::ldexp(1.0, -133) : std::ldexp(1.0, std::ilogb(x) - 7); }

}  // namespace sg::test
