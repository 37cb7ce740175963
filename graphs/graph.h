// graph.h: RAII for captured CUDA graphs and their executables, and the capture guard.
// Capture runs on a non-default stream in thread-local mode; any failure (an illegal call during
// capture, out of memory at instantiation) becomes an sg::Error naming the graph.
#pragma once
#include <cuda_runtime_api.h>

#include <functional>
#include <string>

#include "engine/cuda_handles.h"

namespace sg {

namespace detail {
void destroy_graph(cudaGraph_t g);
void destroy_graph_exec(cudaGraphExec_t g);
}  // namespace detail

class CapturedGraph {
 public:
  CapturedGraph() = default;
  // Runs `body` under stream capture and instantiates the result. `name` labels errors.
  static CapturedGraph capture(const std::string& name, cudaStream_t stream, const std::function<void()>& body);
  void replay(cudaStream_t stream) const;
  cudaGraph_t graph() const { return graph_.get(); }
  cudaGraphExec_t exec() const { return exec_.get(); }
  const std::string& name() const { return name_; }
  explicit operator bool() const { return static_cast<bool>(exec_); }

 private:
  std::string name_;
  Owned<cudaGraph_t, detail::destroy_graph> graph_;
  Owned<cudaGraphExec_t, detail::destroy_graph_exec> exec_;
};

}  // namespace sg
