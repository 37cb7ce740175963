// error.h: the one error type of stepgraph and the check functions every CUDA, cuBLAS and CUPTI
// call goes through. Each check captures the caller's source location and formats with fmt.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <source_location>
#include <stdexcept>
#include <string>

namespace sg {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A kernel failed while it ran (an illegal address, say), reported with where it ran: the node
// (graphs/manifest.h node_fault) or the step (ModelStep). Code that turns a later CUDA error into
// such a report passes this one on as it is.
class KernelFault : public Error {
 public:
  using Error::Error;
};

std::string where(const std::source_location& loc);

// Throws sg::Error naming the CUDA error and the call site when `e` is not cudaSuccess.
void check(cudaError_t e, const std::source_location loc = std::source_location::current());
void check(cublasStatus_t s, const std::source_location loc = std::source_location::current());
// CUPTI results are plain ints here so this header does not pull in cupti.h.
void check_cupti(int result, const std::source_location loc = std::source_location::current());
// After a kernel launch: picks up launch-configuration errors (cudaGetLastError).
void check_launch(const std::source_location loc = std::source_location::current());

// Precondition: throws sg::Error with the formatted message and the call site when false.
template <typename... Args>
struct require {
  require(bool ok, fmt::format_string<Args...> f, Args&&... args,
          const std::source_location loc = std::source_location::current()) {
    if (!ok) throw Error(fmt::format("{} ({})", fmt::format(f, std::forward<Args>(args)...), where(loc)));
  }
};
template <typename... Args>
require(bool, fmt::format_string<Args...>, Args&&...) -> require<Args...>;

}  // namespace sg
