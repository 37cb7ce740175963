// staged_upload.cpp: two pinned buffers used in turn, each guarded by an event.
#include "graphs/staged_upload.h"

#include "engine/error.h"

namespace sg {

StagedUpload::StagedUpload(size_t capacity) : capacity_(capacity) {
  buffers_.resize(2);
  for (Buffer& b : buffers_) b.host = PinnedBuffer(capacity);
}

void StagedUpload::upload(cudaStream_t stream, void* device, size_t bytes, const FillFn& fill) {
  require(bytes <= capacity_ && !buffers_.empty(), "staged upload of {} bytes: the staging buffers hold {}", bytes,
          capacity_);
  Buffer& b = buffers_[static_cast<size_t>(next_)];
  b.consumed.sync();  // returns at once unless this buffer's copy (two uploads ago) is still pending
  next_ = 1 - next_;
  auto* host = b.host.as<std::byte>();
  fill(std::span<std::byte>(host, capacity_));
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
  b.consumed.record(stream);
}

}  // namespace sg
