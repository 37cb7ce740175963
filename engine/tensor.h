// tensor.h: dtypes and non-owning tensor views (pointer, dtype, shape, strides in elements, where
// the memory lives). Views never own memory: arenas and buffers do.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "kernels/numeric.h"

namespace sg {

enum class Where : uint8_t { host, device };

std::string_view dtype_name(DType d);
// "512 B", "4.26 MB", "1.07 GB" (decimal units, as bandwidth figures use).
std::string format_bytes(double bytes);
// Parses "f32", "bf16", "f16", "i32", "i8"; throws sg::Error listing the valid names otherwise.
DType parse_dtype(std::string_view s);

constexpr int kMaxRank = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::f32;
  Where where = Where::device;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};
  std::array<int64_t, kMaxRank> stride{};  // in elements

  // A contiguous (row-major) view.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Where where = Where::device);
  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool is_contiguous() const;
  int64_t dim(int i) const { return shape.at(static_cast<size_t>(i)); }
  // Rows [begin, end) of dimension 0.
  TensorView rows(int64_t begin, int64_t end) const;
  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  std::string describe() const;  // "[32, 8192] bf16 device"
};

}  // namespace sg
