// nccl.cpp: communicators and collectives (nccl.h); stubs that refuse when the build has no NCCL.
#include "engine/nccl.h"

#include <fmt/format.h>

#include "engine/error.h"

#if SG_HAVE_NCCL
#include <nccl.h>
#endif

namespace sg {

#if SG_HAVE_NCCL

namespace {

void check_nccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess) throw Error(fmt::format("{}: {}", what, nccl_error_text(r)));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i8: return ncclInt8;
  }
  return ncclInt8;  // unreachable: every DType is listed
}

}  // namespace

std::string nccl_error_text(int result) {
  const char* last = ncclGetLastError(nullptr);
  return fmt::format("NCCL failed: {}{}{}", ncclGetErrorString(static_cast<ncclResult_t>(result)),
                     last && *last ? ": " : "", last ? last : "");
}

bool nccl_available() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "?";
  // NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9.
  return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
}

NcclComms::NcclComms(const std::vector<int>& devices) {
  require(!devices.empty(), "NCCL communicators: no device given");
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  check_nccl(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()),
             fmt::format("making NCCL communicators for {} GPU{}", devices.size(), devices.size() == 1 ? "" : "s"));
  comms_.assign(comms.begin(), comms.end());
}

NcclComms::~NcclComms() {
  for (ncclComm* c : comms_) {
    if (c) (void)ncclCommDestroy(c);
  }
}

int nccl_ranks(ncclComm* comm) {
  int n = 0;
  check_nccl(ncclCommCount(comm, &n), "asking an NCCL communicator for its rank count");
  return n;
}

int nccl_device(ncclComm* comm) {
  int d = -1;
  check_nccl(ncclCommCuDevice(comm, &d), "asking an NCCL communicator for its device");
  return d;
}

int nccl_all_reduce_sum(ncclComm* comm, void* buf, size_t count, DType dtype, cudaStream_t stream) {
  return ncclAllReduce(buf, buf, count, nccl_type(dtype), ncclSum, comm, stream);
}

int nccl_all_gather(ncclComm* comm, const void* send, void* recv, size_t bytes, cudaStream_t stream) {
  return ncclAllGather(send, recv, bytes, ncclInt8, comm, stream);
}

#else  // no NCCL in this build

namespace {
[[noreturn]] void no_nccl(const std::string& what) {
  throw Error(
      fmt::format("{}: this build has no NCCL (CMake found none: set NCCL_HOME to an NCCL install, or use "
                  "the CUDA toolkit's, and build again)",
                  what));
}
}  // namespace

bool nccl_available() { return false; }
std::string nccl_version() { return ""; }
NcclComms::NcclComms(const std::vector<int>& devices) {
  no_nccl(fmt::format("making NCCL communicators for {} GPU{}", devices.size(), devices.size() == 1 ? "" : "s"));
}
NcclComms::~NcclComms() = default;
int nccl_ranks(ncclComm*) { no_nccl("asking an NCCL communicator for its rank count"); }
int nccl_device(ncclComm*) { no_nccl("asking an NCCL communicator for its device"); }
int nccl_all_reduce_sum(ncclComm*, void*, size_t, DType, cudaStream_t) { return -1; }
int nccl_all_gather(ncclComm*, const void*, void*, size_t, cudaStream_t) { return -1; }
std::string nccl_error_text(int) { return "this build has no NCCL"; }

#endif

}  // namespace sg
