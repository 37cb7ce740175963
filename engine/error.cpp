// error.cpp: formatting of failed checks.
#include "engine/error.h"

#include <cupti.h>

namespace sg {

std::string where(const std::source_location& loc) {
  std::string file = loc.file_name();
  auto pos = file.rfind("/stepgraph/");
  if (pos == std::string::npos) {
    for (const char* top : {"/engine/", "/graphs/", "/kernels/", "/models/", "/tools/", "/tests/"}) {
      auto p = file.rfind(top);
      if (p != std::string::npos) {
        pos = p;
        break;
      }
    }
    if (pos != std::string::npos) file = file.substr(pos + 1);
  }
  return fmt::format("{}:{} in {}", file, loc.line(), loc.function_name());
}

void check(cudaError_t e, const std::source_location loc) {
  if (e != cudaSuccess) {
    throw Error(fmt::format("CUDA error {} ({}): {} at {}", static_cast<int>(e), cudaGetErrorName(e),
                            cudaGetErrorString(e), where(loc)));
  }
}

void check(cublasStatus_t s, const std::source_location loc) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw Error(fmt::format("cuBLAS error {} ({}) at {}", static_cast<int>(s), cublasGetStatusString(s), where(loc)));
  }
}

void check_cupti(int result, const std::source_location loc) {
  if (result != CUPTI_SUCCESS) {
    const char* msg = nullptr;
    cuptiGetResultString(static_cast<CUptiResult>(result), &msg);
    throw Error(fmt::format("CUPTI error {} ({}) at {}", result, msg ? msg : "?", where(loc)));
  }
}

void check_launch(const std::source_location loc) { check(cudaGetLastError(), loc); }

}  // namespace sg
