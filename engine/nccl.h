// nccl.h: the NCCL side of tensor parallelism (models/tp_plan.h): the communicators of the GPUs one
// process drives (one a rank, made together by ncclCommInitAll, destroyed with the owner), and the
// two collectives a rank's step issues on its stream, where a capture records them into the step's
// graph as it records kernels. Built without NCCL (CMake found none), nccl_available() is false and
// making communicators is an Error that names the missing library; nothing else changes.
// NCCL's own header stays out of this one: ncclComm is its opaque communicator type.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "kernels/numeric.h"

struct ncclComm;  // NCCL's communicator (nccl.h: typedef struct ncclComm* ncclComm_t)

namespace sg {

// Whether this build links NCCL, and its version ("2.27.7"; "" without NCCL).
bool nccl_available();
std::string nccl_version();

class NcclComms {
 public:
  // One communicator a device of `devices` (distinct CUDA device ordinals; rank r = devices[r]).
  // Throws sg::Error with NCCL's message when NCCL is missing or refuses (a device listed twice).
  explicit NcclComms(const std::vector<int>& devices);
  ~NcclComms();
  NcclComms(const NcclComms&) = delete;
  NcclComms& operator=(const NcclComms&) = delete;
  int ranks() const { return static_cast<int>(comms_.size()); }
  ncclComm* comm(int rank) const { return comms_.at(static_cast<size_t>(rank)); }  // its device: nccl_device

 private:
  std::vector<ncclComm*> comms_;
};

// The number of ranks of `comm`, and the CUDA device it was made for.
int nccl_ranks(ncclComm* comm);
int nccl_device(ncclComm* comm);

// The collectives return 0 or NCCL's error code (ncclResult_t; -1: this build has no NCCL), which
// nccl_error_text words, so that a step's launch path allocates nothing when they succeed.
// In place: buf [count] of `dtype` becomes the sum over the ranks of `comm`, on `stream`.
int nccl_all_reduce_sum(ncclComm* comm, void* buf, size_t count, DType dtype, cudaStream_t stream);
// recv [ranks x bytes] gets every rank's send [bytes], in rank order, on `stream`.
int nccl_all_gather(ncclComm* comm, const void* send, void* recv, size_t bytes, cudaStream_t stream);
// "NCCL failed: invalid usage (...): <NCCL's last error>".
std::string nccl_error_text(int result);

}  // namespace sg
