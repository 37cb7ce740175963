// graph.h: RAII for captured CUDA graphs and their executables, and the capture guard.
// Capture runs on a non-default stream in thread-local mode; any failure (an illegal call during
// capture, out of memory at instantiation) becomes an sg::Error naming the graph. Each capture
// keeps what it cost (CaptureStats): its nodes, the host time of the capture and of the
// instantiation, and the device memory the instantiation took.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "engine/cuda_handles.h"

namespace sg {

namespace detail {
void destroy_graph(cudaGraph_t g);
void destroy_graph_exec(cudaGraphExec_t g);
}  // namespace detail

// What one capture cost. Times are host wall-clock: capture_ms from cudaStreamBeginCapture to
// cudaStreamEndCapture (the step's launches, recorded), instantiate_ms around cudaGraphInstantiate.
// instantiate_bytes: the device's free memory (cudaMemGetInfo) before instantiation minus after it,
// so what the driver reserved for the executable graph (device-wide: another process allocating
// at the same moment would show up here too; memory taken later, at the first launch, does not).
struct CaptureStats {
  int kernel_nodes = 0;  // cudaGraphNodeTypeKernel
  int other_nodes = 0;   // memcpy, memset, event, empty, ... nodes
  double capture_ms = 0, instantiate_ms = 0;
  int64_t instantiate_bytes = 0;
};
// Counts the kernel nodes and the others among `types` into `s` (replacing its counts).
void count_node_types(std::span<const cudaGraphNodeType> types, CaptureStats& s);

class CapturedGraph {
 public:
  CapturedGraph() = default;
  // Runs `body` under stream capture and instantiates the result. `name` labels errors.
  static CapturedGraph capture(const std::string& name, cudaStream_t stream, const std::function<void()>& body);
  void replay(cudaStream_t stream) const;
  cudaGraph_t graph() const { return graph_.get(); }
  cudaGraphExec_t exec() const { return exec_.get(); }
  const std::string& name() const { return name_; }
  const CaptureStats& stats() const { return stats_; }
  explicit operator bool() const { return static_cast<bool>(exec_); }

 private:
  std::string name_;
  CaptureStats stats_;
  Owned<cudaGraph_t, detail::destroy_graph> graph_;
  Owned<cudaGraphExec_t, detail::destroy_graph_exec> exec_;
};

}  // namespace sg
