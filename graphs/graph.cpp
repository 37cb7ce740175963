// graph.cpp: capture, instantiate, replay.
#include "graphs/graph.h"

#include <fmt/format.h>

#include "engine/error.h"

namespace sg {
namespace detail {
void destroy_graph(cudaGraph_t g) { cudaGraphDestroy(g); }
void destroy_graph_exec(cudaGraphExec_t g) { cudaGraphExecDestroy(g); }
}  // namespace detail

CapturedGraph CapturedGraph::capture(const std::string& name, cudaStream_t stream, const std::function<void()>& body) {
  require(stream != nullptr, "graph '{}': capture needs a non-default stream", name);
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t g = nullptr;
  try {
    body();
  } catch (const std::exception& ex) {
    cudaStreamEndCapture(stream, &g);  // leave the stream usable
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw Error(fmt::format("graph '{}': capture failed: {}", name, ex.what()));
  }
  cudaError_t e = cudaStreamEndCapture(stream, &g);
  if (e != cudaSuccess) {
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw Error(fmt::format("graph '{}': capture failed: {} (a synchronous or default-stream call during capture?)",
                            name, cudaGetErrorString(e)));
  }
  CapturedGraph out;
  out.name_ = name;
  out.graph_ = Owned<cudaGraph_t, detail::destroy_graph>(g);
  cudaGraphExec_t ex = nullptr;
  e = cudaGraphInstantiate(&ex, g, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw Error(fmt::format("graph '{}': instantiation failed: {}", name, cudaGetErrorString(e)));
  }
  out.exec_ = Owned<cudaGraphExec_t, detail::destroy_graph_exec>(ex);
  return out;
}

void CapturedGraph::replay(cudaStream_t stream) const {
  require(static_cast<bool>(exec_), "graph '{}' was never captured", name_);
  check(cudaGraphLaunch(exec_.get(), stream));
}

}  // namespace sg
