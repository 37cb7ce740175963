// tensor.cpp: view arithmetic and names.
#include "engine/tensor.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "engine/error.h"
#include "engine/text.h"

namespace sg {

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i8: return "i8";
  }
  return "?";
}

std::string format_bytes(double b) {
  if (b < 1e3) return fmt::format("{:.0f} B", b);
  if (b < 1e6) return fmt::format("{:.2f} kB", b / 1e3);
  if (b < 1e9) return fmt::format("{:.2f} MB", b / 1e6);
  if (b < 1e12) return fmt::format("{:.2f} GB", b / 1e9);
  return fmt::format("{:.2f} TB", b / 1e12);
}

DType parse_dtype(std::string_view s) {
  for (DType d : {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i8}) {
    if (s == dtype_name(d)) return d;
  }
  throw Error(fmt::format("unknown dtype '{}' (valid: f32, bf16, f16, i32, i8)", printable(s, 40)));
}

TensorView TensorView::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape, Where where) {
  require(shape.size() <= kMaxRank, "rank {} exceeds the maximum {}", shape.size(), kMaxRank);
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.where = where;
  v.rank = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) {
    require(s >= 0, "negative dimension {}", s);
    v.shape[static_cast<size_t>(i++)] = s;
  }
  int64_t st = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.stride[static_cast<size_t>(d)] = st;
    st *= v.shape[static_cast<size_t>(d)];
  }
  return v;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= shape[static_cast<size_t>(d)];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t st = 1;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[static_cast<size_t>(d)] != 1 && stride[static_cast<size_t>(d)] != st) return false;
    st *= shape[static_cast<size_t>(d)];
  }
  return true;
}

TensorView TensorView::rows(int64_t begin, int64_t end) const {
  require(rank >= 1 && 0 <= begin && begin <= end && end <= shape[0], "rows [{}, {}) out of range for {}", begin, end,
          describe());
  TensorView v = *this;
  v.data = static_cast<char*>(data) + static_cast<size_t>(begin * stride[0]) * dtype_size(dtype);
  v.shape[0] = end - begin;
  return v;
}

std::string TensorView::describe() const {
  std::vector<int64_t> s(shape.begin(), shape.begin() + rank);
  return fmt::format("[{}] {} {}", fmt::join(s, ", "), dtype_name(dtype), where == Where::host ? "host" : "device");
}

}  // namespace sg
