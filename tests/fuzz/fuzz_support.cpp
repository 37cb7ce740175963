// fuzz_support.cpp: sg::where (engine/error.cpp) for the fuzz targets. The targets link only the
// pure C++ sources they fuzz; engine/error.cpp also defines the CUDA, cuBLAS and CUPTI checks,
// which would pull in those libraries, so this file gives the one function the sources need.
#include <fmt/format.h>

#include <source_location>
#include <string>

namespace sg {
std::string where(const std::source_location& loc) {
  return fmt::format("{}:{} in {}", loc.file_name(), loc.line(), loc.function_name());
}
}  // namespace sg
