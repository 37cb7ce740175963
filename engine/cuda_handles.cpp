// cuda_handles.cpp: creation (checked) and release (never throws) of CUDA handles.
#include "engine/cuda_handles.h"

#include "engine/error.h"
#include "engine/tensor.h"

namespace sg {
namespace detail {
void free_device(void* p) { cudaFree(p); }
void free_pinned(void* p) { cudaFreeHost(p); }
void destroy_stream(cudaStream_t s) { cudaStreamDestroy(s); }
void destroy_event(cudaEvent_t e) { cudaEventDestroy(e); }
void destroy_cublas(cublasHandle_t h) { cublasDestroy(h); }
}  // namespace detail

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are unaffected
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error(fmt::format("device allocation of {} failed ({}); {} free of {}", format_bytes(bytes),
                            cudaGetErrorString(e), format_bytes(free_b), format_bytes(total_b)));
  }
  p_ = Owned<void*, detail::free_device>(p);
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes));
  p_ = Owned<void*, detail::free_pinned>(p);
}

Stream::Stream() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  s_ = Owned<cudaStream_t, detail::destroy_stream>(s);
}
void Stream::sync() const { check(cudaStreamSynchronize(s_.get())); }

Event::Event(bool timing) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  e_ = Owned<cudaEvent_t, detail::destroy_event>(e);
}
void Event::record(cudaStream_t s) const { check(cudaEventRecord(e_.get(), s)); }
void Event::sync() const { check(cudaEventSynchronize(e_.get())); }
float Event::elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0.f;
  check(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

CublasHandle::CublasHandle(cudaStream_t stream, size_t workspace_bytes) : workspace_(workspace_bytes) {
  cublasHandle_t h = nullptr;
  check(cublasCreate(&h));
  h_ = Owned<cublasHandle_t, detail::destroy_cublas>(h);
  check(cublasSetStream(h, stream));
  check(cublasSetWorkspace(h, workspace_.data(), workspace_.bytes()));
  // Zeroed once, on the handle's stream, before any GEMM: cuBLAS's split-K reduce kernel reads
  // workspace words that no kernel of the call wrote (compute-sanitizer initcheck counted 245,760
  // such reads in one test run, docs/RELIABILITY.md); the results did not depend on them, and with
  // the workspace defined from the start such a read can never see garbage.
  if (workspace_.bytes() > 0) check(cudaMemsetAsync(workspace_.data(), 0, workspace_.bytes(), stream));
  // Split-K partial sums stay in f32 even when the output is bf16/f16 (the default allows them to be
  // reduced in the output type, which loses accuracy on long reductions).
  check(cublasSetMathMode(
      h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
}

}  // namespace sg
