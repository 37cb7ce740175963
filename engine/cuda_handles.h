// cuda_handles.h: move-only RAII owners of every CUDA handle the engine uses (device and pinned
// buffers, streams, events, the cuBLAS handle). Destructors never throw; creation is checked.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace sg {

// Owns a handle of type T and releases it with Release on destruction. Move-only.
template <typename T, void (*Release)(T)>
class Owned {
 public:
  Owned() = default;
  explicit Owned(T h) : h_(h) {}
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& o) noexcept : h_(std::exchange(o.h_, T{})) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, T{});
    }
    return *this;
  }
  ~Owned() { reset(); }
  void reset() {
    if (h_) Release(std::exchange(h_, T{}));
  }
  T get() const { return h_; }
  explicit operator bool() const { return h_ != T{}; }

 private:
  T h_{};
};

namespace detail {
void free_device(void* p);
void free_pinned(void* p);
void destroy_stream(cudaStream_t s);
void destroy_event(cudaEvent_t e);
void destroy_cublas(cublasHandle_t h);
}  // namespace detail

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // cudaMalloc; throws sg::Error naming the size on failure
  void* data() const { return p_.get(); }
  size_t bytes() const { return bytes_; }

 private:
  Owned<void*, detail::free_device> p_;
  size_t bytes_ = 0;
};

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);  // cudaMallocHost
  void* data() const { return p_.get(); }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_.get());
  }

 private:
  Owned<void*, detail::free_pinned> p_;
  size_t bytes_ = 0;
};

class Stream {
 public:
  Stream();  // a non-blocking stream (never synchronises with the legacy default stream)
  cudaStream_t get() const { return s_.get(); }
  void sync() const;

 private:
  Owned<cudaStream_t, detail::destroy_stream> s_;
};

class Event {
 public:
  explicit Event(bool timing = true);
  cudaEvent_t get() const { return e_.get(); }
  void record(cudaStream_t s) const;
  void sync() const;
  // Milliseconds between two recorded, completed events.
  static float elapsed_ms(const Event& start, const Event& stop);

 private:
  Owned<cudaEvent_t, detail::destroy_event> e_;
};

// A cuBLAS handle bound to one stream with a workspace allocated up front, so that GEMMs can be
// captured into graphs (no lazy allocation inside a capture).
class CublasHandle {
 public:
  CublasHandle(cudaStream_t stream, size_t workspace_bytes = size_t{32} << 20);
  cublasHandle_t get() const { return h_.get(); }
  void* workspace() const { return workspace_.data(); }
  size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  Owned<cublasHandle_t, detail::destroy_cublas> h_;
  DeviceBuffer workspace_;
};

}  // namespace sg
