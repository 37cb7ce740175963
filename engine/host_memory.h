// host_memory.h: how much host memory this process can still allocate, so that a large CPU-side
// allocation (the CPU reference model's weights, states and caches) is checked up front and
// refused with the numbers, instead of ending in std::bad_alloc or the kernel's OOM killer.
#pragma once
#include <cstdint>
#include <string>

namespace sg {

struct HostMemory {
  uint64_t available = 0;  // bytes this process may still allocate (the smaller of the limits below)
  std::string source;      // where that figure comes from, e.g. "MemAvailable in /proc/meminfo"
};

// The smaller of /proc/meminfo's MemAvailable and, when an address-space limit (RLIMIT_AS) is set,
// that limit minus the process's current virtual size (/proc/self/statm). When neither can be
// read, `available` is UINT64_MAX and `source` says so.
HostMemory available_host_memory();

// Throws sg::Error when need > have.available:
//   "<what> needs <need> of host memory (<detail>) but only <available> is available (<source>)"
// with sizes in GiB/MiB and exact bytes.
void check_host_memory(uint64_t need, const std::string& what, const std::string& detail,
                       const HostMemory& have = available_host_memory());

// "1.50 GiB (1610612736 bytes)".
std::string format_host_bytes(uint64_t bytes);

}  // namespace sg
