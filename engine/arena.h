// arena.h: one device allocation carved into typed views, so that pointers never move and nothing
// allocates inside a step. Layout code runs twice: once against a measuring arena (no memory,
// counts bytes), then against a real arena of exactly that size. After freeze(), carving is an
// error: that is the guard that keeps allocations out of captured steps.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <string>
#include <vector>

#include "engine/cuda_handles.h"
#include "engine/tensor.h"

namespace sg {

class Arena {
 public:
  static constexpr size_t kAlign = 256;

  static Arena measure() { return Arena(); }                          // counts bytes; views have null data
  explicit Arena(size_t capacity_bytes, std::string name = "arena");  // one cudaMalloc

  // Carves a contiguous view; throws sg::Error naming the tensor when frozen or full.
  TensorView take(const std::string& what, DType dtype, std::initializer_list<int64_t> shape);
  // The category the following takes are recorded under (Entry::section; "" until set).
  void section(std::string name) { section_ = std::move(name); }
  void freeze() { frozen_ = true; }
  bool frozen() const { return frozen_; }
  bool measuring() const { return measuring_; }
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }
  // Zero-fills the whole arena (stream-ordered).
  void zero(cudaStream_t stream) const;

  struct Entry {
    std::string what;
    size_t offset, bytes;
    std::string section;  // the section() in force when it was taken
    std::string shape;    // "[8192, 2560] bf16"
  };
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  Arena() : measuring_(true) {}
  DeviceBuffer buf_;
  std::string name_ = "arena";
  size_t capacity_ = 0, used_ = 0;
  bool measuring_ = false, frozen_ = false;
  std::vector<Entry> entries_;
  std::string section_;
};

}  // namespace sg
