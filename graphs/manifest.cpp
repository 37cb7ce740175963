// manifest.cpp: label capture and reading kernel nodes back from a graph.
#include "graphs/manifest.h"

#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <queue>

#include "engine/error.h"

namespace sg {

void NodeRecorder::launched(cudaStream_t stream, NodeLabel label) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  size_t ndeps = 0;
  check(cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr, &deps, nullptr, &ndeps));
  if (status != cudaStreamCaptureStatusActive) {
    ++eager_;
    return;
  }
  // After a launch the capture's frontier is the node(s) that launch added (one for a kernel; a
  // library call such as a GEMM may leave more): label each.
  require(ndeps >= 1, "capture frontier is empty after launching '{}'", label.op);
  for (size_t i = 0; i < ndeps; ++i) labels_[deps[i]] = label;
}

int Manifest::unlabelled() const {
  int n = 0;
  for (const auto& node : nodes) n += node.label.op == "?";
  return n;
}

std::string demangle(const char* name) {
  if (!name) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = (status == 0 && d) ? d : name;
  std::free(d);
  return out;
}

namespace {

// Kernel nodes in a topological order (Kahn's algorithm, ties by the graph's node order).
std::vector<cudaGraphNode_t> topo_kernel_nodes(cudaGraph_t graph) {
  size_t n = 0;
  check(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  check(cudaGraphGetNodes(graph, nodes.data(), &n));
  std::map<cudaGraphNode_t, size_t> indeg;
  for (auto node : nodes) {
    size_t nd = 0;
    check(cudaGraphNodeGetDependencies(node, nullptr, nullptr, &nd));
    indeg[node] = nd;
  }
  std::queue<cudaGraphNode_t> ready;
  for (auto node : nodes) {
    if (indeg[node] == 0) ready.push(node);
  }
  std::vector<cudaGraphNode_t> order;
  while (!ready.empty()) {
    auto node = ready.front();
    ready.pop();
    order.push_back(node);
    size_t nd = 0;
    check(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &nd));
    std::vector<cudaGraphNode_t> outs(nd);
    check(cudaGraphNodeGetDependentNodes(node, outs.data(), nullptr, &nd));
    for (auto o : outs) {
      if (--indeg[o] == 0) ready.push(o);
    }
  }
  std::vector<cudaGraphNode_t> kernels;
  for (auto node : order) {
    cudaGraphNodeType t;
    check(cudaGraphNodeGetType(node, &t));
    if (t == cudaGraphNodeTypeKernel) kernels.push_back(node);
  }
  return kernels;
}

}  // namespace

Manifest build_manifest(const std::string& graph_name, const std::string& arms, cudaGraph_t graph,
                        const NodeRecorder& recorder) {
  Manifest m;
  m.graph = graph_name;
  m.arms = arms;
  int index = 0;
  const std::vector<cudaGraphNode_t> kernels = topo_kernel_nodes(graph);
  std::map<cudaGraphNode_t, int> kernel_index;
  for (size_t i = 0; i < kernels.size(); ++i) kernel_index[kernels[i]] = static_cast<int>(i);
  for (cudaGraphNode_t node : kernels) {
    cudaKernelNodeParams kp{};
    check(cudaGraphKernelNodeGetParams(node, &kp));
    ManifestNode mn;
    mn.index = index++;
    const char* fname = nullptr;
    if (cudaFuncGetName(&fname, kp.func) != cudaSuccess) {
      cudaGetLastError();
      fname = nullptr;
    }
    mn.kernel = demangle(fname);
    mn.grid = Dim3{kp.gridDim.x, kp.gridDim.y, kp.gridDim.z};
    mn.block = Dim3{kp.blockDim.x, kp.blockDim.y, kp.blockDim.z};
    mn.smem_bytes = kp.sharedMemBytes;
    uint64_t id = 0;
    if (cuptiGetGraphNodeId(node, &id) == CUPTI_SUCCESS) mn.cupti_id = id;
    auto it = recorder.labels().find(node);
    if (it != recorder.labels().end()) {
      mn.label = it->second;
    } else {
      mn.label = NodeLabel{-1, std::string(1, '?'), std::string(1, '?'), 0.0};
    }
    m.nodes.push_back(std::move(mn));
  }
  // Kernel-to-kernel edges: walk each kernel's dependencies back through non-kernel nodes.
  for (size_t i = 0; i < kernels.size(); ++i) {
    std::vector<cudaGraphNode_t> todo = {kernels[i]};
    std::map<cudaGraphNode_t, bool> seen;
    std::vector<int> from;
    while (!todo.empty()) {
      cudaGraphNode_t n = todo.back();
      todo.pop_back();
      size_t nd = 0;
      check(cudaGraphNodeGetDependencies(n, nullptr, nullptr, &nd));
      std::vector<cudaGraphNode_t> deps(nd);
      if (nd) check(cudaGraphNodeGetDependencies(n, deps.data(), nullptr, &nd));
      for (auto d : deps) {
        if (seen[d]) continue;
        seen[d] = true;
        auto k = kernel_index.find(d);
        if (k != kernel_index.end()) {
          from.push_back(k->second);
        } else {
          todo.push_back(d);
        }
      }
    }
    std::sort(from.begin(), from.end());
    for (int f : from) m.edges.emplace_back(f, static_cast<int>(i));
  }
  return m;
}

nlohmann::json to_json(const Manifest& m) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& n : m.nodes) {
    nodes.push_back({{"index", n.index},
                     {"layer", n.label.layer},
                     {"op", n.label.op},
                     {"arm", n.label.arm},
                     {"kernel", n.kernel},
                     {"grid", {n.grid.x, n.grid.y, n.grid.z}},
                     {"block", {n.block.x, n.block.y, n.block.z}},
                     {"smem_bytes", n.smem_bytes},
                     {"bytes", n.label.bytes}});
  }
  return {{"graph", m.graph}, {"arms", m.arms}, {"nodes", nodes}, {"edges", m.edges}};
}

}  // namespace sg
