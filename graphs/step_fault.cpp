// step_fault.cpp: see step_fault.h.
#include "graphs/step_fault.h"

#include <fmt/format.h>

#include "engine/error.h"
#include "graphs/manifest.h"

namespace sg {

std::string step_fault_message(const std::optional<RanStep>& step, cudaError_t e, bool lost, std::string_view during,
                               std::string_view hint) {
  const std::string what =
      step ? fmt::format("{} {}", step->replayed ? "graph" : "eager step", describe(step->key)) : std::string("step");
  return fmt::format("the {} failed while it ran{}: {} ({}){}{}", what,
                     during.empty() ? std::string() : fmt::format(" ({})", during), cudaGetErrorName(e),
                     cudaGetErrorString(e),
                     lost ? "; the CUDA context is lost, so this process cannot run further steps" : "", hint);
}

void StepFaults::fault(cudaError_t e, std::string_view during) const {
  throw KernelFault(step_fault_message(last_, e, sticky_error(), during, hint_));
}

void StepFaults::earlier() const {
  // Only after a step ran; a lost context returns its sticky error to every call (context_error).
  if (!last_) return;
  if (const cudaError_t e = context_error(); e != cudaSuccess) fault(e);
}

}  // namespace sg
