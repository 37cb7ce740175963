// device.cpp: device probe.
#include "engine/device.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

namespace sg {

DeviceInfo probe_device(int ordinal) {
  DeviceInfo info;
  info.ordinal = ordinal;
  cudaRuntimeGetVersion(&info.runtime_version);
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    const std::string detail = fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString(e), cudaGetErrorName(e));
    if (e == cudaErrorNoDevice) {
      info.reason = fmt::format("no CUDA device was found ({})", detail);
    } else if (e == cudaErrorInsufficientDriver) {
      info.reason = fmt::format("no CUDA driver was found, or it is older than this build's CUDA runtime {}.{} ({})",
                                info.runtime_version / 1000, (info.runtime_version % 1000) / 10, detail);
    } else {
      info.reason = fmt::format("no usable CUDA driver or device was found ({})", detail);
    }
    return info;
  }
  if (count <= ordinal) {
    info.reason = fmt::format("no CUDA device was found: {} device(s) visible, asked for device {}", count, ordinal);
    return info;
  }
  cudaDeviceProp p{};
  e = cudaGetDeviceProperties(&p, ordinal);
  if (e != cudaSuccess) {
    cudaGetLastError();
    info.reason = fmt::format("CUDA device {} unusable: {}", ordinal, cudaGetErrorString(e));
    return info;
  }
  cudaDriverGetVersion(&info.driver_version);
  info.ok = true;
  info.name = p.name;
  info.sm_major = p.major;
  info.sm_minor = p.minor;
  info.sm_count = p.multiProcessorCount;
  info.l2_bytes = static_cast<size_t>(p.l2CacheSize);
  info.total_mem = p.totalGlobalMem;
  return info;
}

std::string DeviceInfo::describe() const {
  if (!ok) return reason;
  return fmt::format("{} (sm_{}{}, {} SMs, {} MB L2, {:.1f} GiB), driver {}.{}, runtime {}.{}", name, sm_major,
                     sm_minor, sm_count, l2_bytes >> 20, total_mem / 1073741824.0, driver_version / 1000,
                     (driver_version % 1000) / 10, runtime_version / 1000, (runtime_version % 1000) / 10);
}

}  // namespace sg
