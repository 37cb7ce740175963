// step_settings.cpp: the device query (step_settings.h), which asks the CUDA runtime; the rest is
// in step_settings_host.cpp.
#include <cuda_runtime_api.h>

#include "engine/error.h"
#include "models/step_settings.h"

namespace sg {

DeviceLimits DeviceLimits::current() {
  DeviceLimits d;
  int dev = 0;
  check(cudaGetDevice(&dev));
  check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
  check(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  check(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev));
  check(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
  return d;
}

}  // namespace sg
