// graph.cpp: capture, instantiate, replay, and what a capture cost.
#include "graphs/graph.h"

#include <fmt/format.h>

#include <chrono>
#include <vector>

#include "engine/error.h"

namespace sg {
namespace detail {
void destroy_graph(cudaGraph_t g) { cudaGraphDestroy(g); }
void destroy_graph_exec(cudaGraphExec_t g) { cudaGraphExecDestroy(g); }
}  // namespace detail

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The device's free memory, or -1 when the runtime cannot say (the stats then show 0 bytes).
int64_t free_device_bytes() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return static_cast<int64_t>(free);
}

// The node types of a captured graph (empty when the runtime cannot list them).
std::vector<cudaGraphNodeType> node_types(cudaGraph_t g) {
  size_t n = 0;
  if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) return {};
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0 && cudaGraphGetNodes(g, nodes.data(), &n) != cudaSuccess) return {};
  std::vector<cudaGraphNodeType> types;
  types.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    cudaGraphNodeType t{};
    if (cudaGraphNodeGetType(nodes[i], &t) == cudaSuccess) types.push_back(t);
  }
  return types;
}

}  // namespace

void count_node_types(std::span<const cudaGraphNodeType> types, CaptureStats& s) {
  s.kernel_nodes = s.other_nodes = 0;
  for (cudaGraphNodeType t : types) ++(t == cudaGraphNodeTypeKernel ? s.kernel_nodes : s.other_nodes);
}

CapturedGraph CapturedGraph::capture(const std::string& name, cudaStream_t stream, const std::function<void()>& body) {
  require(stream != nullptr, "graph '{}': capture needs a non-default stream", name);
  const auto t_capture = std::chrono::steady_clock::now();
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
  out.stats_.capture_ms = ms_since(t_capture);
  out.name_ = name;
  out.graph_ = Owned<cudaGraph_t, detail::destroy_graph>(g);
  count_node_types(node_types(g), out.stats_);
  cudaGraphExec_t ex = nullptr;
  const int64_t free_before = free_device_bytes();
  const auto t_instantiate = std::chrono::steady_clock::now();
  e = cudaGraphInstantiate(&ex, g, 0);
  out.stats_.instantiate_ms = ms_since(t_instantiate);
  const int64_t free_after = free_device_bytes();
  if (free_before >= 0 && free_after >= 0) out.stats_.instantiate_bytes = free_before - free_after;
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
