// arena.cpp: bump allocation over one device buffer.
#include "engine/arena.h"

#include "engine/error.h"

namespace sg {

Arena::Arena(size_t capacity_bytes, std::string name)
    : buf_(capacity_bytes), name_(std::move(name)), capacity_(capacity_bytes) {}

TensorView Arena::take(const std::string& what, DType dtype, std::initializer_list<int64_t> shape) {
  require(!frozen_, "{}: cannot allocate '{}' after the arena was frozen (allocation inside a step?)", name_, what);
  TensorView v = TensorView::contiguous(nullptr, dtype, shape);
  size_t offset = (used_ + kAlign - 1) / kAlign * kAlign;
  size_t bytes = v.bytes();
  if (!measuring_) {
    require(offset + bytes <= capacity_, "{}: '{}' ({} bytes) does not fit: {} of {} bytes used", name_, what, bytes,
            offset, capacity_);
    v.data = static_cast<char*>(buf_.data()) + offset;
  }
  used_ = offset + bytes;
  std::string dims;
  for (int64_t d : shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
  entries_.push_back({what, offset, bytes, section_, "[" + dims + "] " + std::string(dtype_name(dtype))});
  return v;
}

void Arena::zero(cudaStream_t stream) const {
  if (!measuring_ && capacity_ > 0) check(cudaMemsetAsync(buf_.data(), 0, capacity_, stream));
}

}  // namespace sg
