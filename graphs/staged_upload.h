// staged_upload.h: the host-to-device upload of a step's inputs, through two pinned staging
// buffers used in turn. Each buffer's event marks when its copy has been consumed by the stream,
// so the host fills the inputs of step n+1 while step n runs and waits only for the copy of step
// n-1 (the one that used the same buffer). The copy goes into one static device block that the
// captured graphs read, so a replay needs no pointer updates.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "engine/cuda_handles.h"

namespace sg {

class StagedUpload {
 public:
  // Fills the staging buffer (all of its capacity is writable; only the first `bytes` are copied).
  using FillFn = std::function<void(std::span<std::byte> host)>;

  StagedUpload() = default;                // no buffers: every upload is an error
  explicit StagedUpload(size_t capacity);  // two pinned buffers of `capacity` bytes and their events

  // Waits until the next buffer's previous copy has been consumed, fills it, enqueues one async
  // copy of its first `bytes` bytes to `device` on `stream`, and records the buffer's event.
  void upload(cudaStream_t stream, void* device, size_t bytes, const FillFn& fill);

  size_t capacity() const { return capacity_; }
  // The buffer the next upload uses (0 or 1).
  int next() const { return next_; }

 private:
  struct Buffer {
    PinnedBuffer host;
    Event consumed{false};
  };
  std::vector<Buffer> buffers_;
  size_t capacity_ = 0;
  int next_ = 0;
};

}  // namespace sg
