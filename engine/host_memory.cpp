// host_memory.cpp: available_host_memory() and check_host_memory() (see host_memory.h).
#include "engine/host_memory.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <limits>

#include "engine/error.h"

namespace sg {
namespace {

// MemAvailable in bytes, or 0 when it cannot be read.
uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

// The process's virtual size in bytes, or 0 when it cannot be read.
uint64_t virtual_size() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0;
  if (!(in >> pages)) return 0;
  const long page = ::sysconf(_SC_PAGESIZE);
  return pages * static_cast<uint64_t>(page > 0 ? page : 4096);
}

}  // namespace

HostMemory available_host_memory() {
  HostMemory m;
  m.available = std::numeric_limits<uint64_t>::max();
  m.source = "no limit could be read";
  if (const uint64_t avail = mem_available(); avail > 0) {
    m.available = avail;
    m.source = "MemAvailable in /proc/meminfo";
  }
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const uint64_t limit = rl.rlim_cur, used = virtual_size();
    const uint64_t left = limit > used ? limit - used : 0;
    if (left < m.available) {
      m.available = left;
      m.source = fmt::format(
          "the address-space limit (RLIMIT_AS, ulimit -v) of {} minus the {} this process "
          "already maps",
          format_host_bytes(limit), format_host_bytes(used));
    }
  }
  return m;
}

std::string format_host_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t{1} << 30)) return fmt::format("{:.2f} GiB ({} bytes)", b / 1073741824.0, bytes);
  return fmt::format("{:.2f} MiB ({} bytes)", b / 1048576.0, bytes);
}

void check_host_memory(uint64_t need, const std::string& what, const std::string& detail, const HostMemory& have) {
  if (need <= have.available) return;
  throw Error(fmt::format("{} needs {} of host memory ({}) but only {} is available ({})", what,
                          format_host_bytes(need), detail, format_host_bytes(have.available), have.source));
}

}  // namespace sg
