// device.h: is there a usable CUDA device, and what is it. Never throws: callers decide whether a
// missing device is an error (commands) or a reason to skip (GPU tests).
#pragma once
#include <string>

namespace sg {

struct DeviceInfo {
  bool ok = false;
  std::string reason;  // why there is no usable device (empty when ok)
  std::string name;
  int ordinal = 0;
  int sm_major = 0, sm_minor = 0;
  int sm_count = 0;
  size_t l2_bytes = 0;
  size_t total_mem = 0;
  int driver_version = 0, runtime_version = 0;
  std::string describe() const;  // "NVIDIA H200 (sm_90, 132 SMs, 60 MB L2, 139.8 GiB), driver 13.0, runtime 13.0"
};

DeviceInfo probe_device(int ordinal = 0);

}  // namespace sg
