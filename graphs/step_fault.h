// step_fault.h: which step a kernel fault belongs to. A kernel that faults while it runs (an
// illegal address) surfaces later, at a synchronisation or at the next call that meets the sticky
// error, with no trace of the kernel. A step runner (ModelStep, GdnDecodeStep) therefore remembers
// the step it ran last, a graph replay or an eager step, by its graph key, and reports such an
// error as that step's fault: a KernelFault naming the step, the CUDA error, whether the context is
// lost and how to find the node (docs/RELIABILITY.md):
//   "the graph decode 32 failed while it ran: cudaErrorIllegalAddress (an illegal memory access was
//   encountered); the CUDA context is lost, so this process cannot run further steps. To name ..."
// Remembering a step is a plain store (no allocation, no CUDA call): it sits on the replay path.
#pragma once
#include <cuda_runtime_api.h>

#include <optional>
#include <string>
#include <string_view>

#include "graphs/step_graphs.h"

namespace sg {

struct RanStep {
  GraphKey key;
  bool replayed = false;  // a graph replay, else an eager step
};

// The report of a fault of `step` (none: "the step"): "the graph decode 32 failed while it ran
// (<during>): <error name> (<error string>)", then "; the CUDA context is lost, so this process
// cannot run further steps" when `lost`, then `hint` (a sentence starting with ". " or empty).
// `during` (empty: none) says what the replays did when they were not the step's own ("replayed
// for its marginal costs, with the nodes of group 'postconv' disabled"). Makes no CUDA call beyond
// the error's name and string, so it is the same on every machine.
std::string step_fault_message(const std::optional<RanStep>& step, cudaError_t e, bool lost, std::string_view during,
                               std::string_view hint);

class StepFaults {
 public:
  // `hint`: how to find the kernel node, appended to every report (". To name the kernel node, ...").
  explicit StepFaults(std::string hint = {}) : hint_(std::move(hint)) {}

  // The step just enqueued: `key`'s graph replayed, or its launches made eagerly.
  void ran(const GraphKey& key, bool replayed) { last_ = RanStep{key, replayed}; }
  const std::optional<RanStep>& last() const { return last_; }

  // The last step failed while it ran: throws a KernelFault with step_fault_message (the context's
  // loss asked of the device: context_error(), graphs/manifest.h).
  [[noreturn]] void fault(cudaError_t e, std::string_view during = {}) const;
  // fault(e, during) when `e` is not cudaSuccess (a synchronisation or call after the steps).
  void check(cudaError_t e, std::string_view during = {}) const {
    if (e != cudaSuccess) fault(e, during);
  }
  // In a catch block, for an Error thrown while a step was uploaded or launched: when a step ran
  // before and the CUDA context is lost, that step faulted (the call only met the sticky error), so
  // its fault is thrown; otherwise returns, and the caller rethrows.
  void earlier() const;

 private:
  std::string hint_;
  std::optional<RanStep> last_;
};

}  // namespace sg
