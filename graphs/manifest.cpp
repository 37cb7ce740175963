// manifest.cpp: label capture and reading kernel nodes back from a graph.
#include "graphs/manifest.h"

#include <cuda.h>  // driver types only: entry points are fetched at run time, libcuda is not linked
#include <cupti.h>
#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <queue>

#include "engine/error.h"
#include "kernels/launch_check.h"

namespace sg {

void NodeRecorder::launched(cudaStream_t stream, NodeLabel label, int kernels) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaGraph_t graph = nullptr;
  check(cudaStreamGetCaptureInfo(stream, &status, nullptr, &graph, nullptr, nullptr, nullptr));
  if (status != cudaStreamCaptureStatusActive) {
    ++eager_;
    return;
  }
  // Every node the capture gained since the last call belongs to this launch: one kernel node for
  // our kernels; a library call (cuBLAS split-K: the GEMM and its reduction) may add several.
  // Counting them here catches a launch that was never labelled at capture time, not in a report.
  size_t n = 0;
  check(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n) check(cudaGraphGetNodes(graph, nodes.data(), &n));
  // The launch's bytes and FLOPs go to its first kernel node (a library's split-K GEMM, not its
  // reduction), so summing a family's nodes counts them once.
  int added = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!seen_.insert(nodes[i]).second) continue;
    cudaGraphNodeType t;
    check(cudaGraphNodeGetType(nodes[i], &t));
    NodeLabel l = label;
    if (t == cudaGraphNodeTypeKernel && added > 0) l.bytes = l.flops = 0;
    labels_[nodes[i]] = l;
    added += t == cudaGraphNodeTypeKernel;
  }
  require(kernels == kAnyNodes || (kernels == kAnyKernels ? added >= 1 : added == kernels),
          "the launch labelled '{}' (layer {}) added {} kernel nodes to the capture, expected {}: is a "
          "launch before it missing its label?",
          label.op, label.layer, added, kernels == kAnyKernels ? std::string("one or more") : std::to_string(kernels));
}

void launch_failed(cudaError_t e, const NodeLabel& label) {
  (void)cudaGetLastError();  // a launch error is not sticky: clear it so the process can go on
  const std::string where = label.layer >= 0 ? fmt::format("layer {} ", label.layer) : std::string();
  const std::string refusal = take_launch_refusal();  // the launcher's reason (kernels/launch_check.h)
  if (e == cudaErrorInvalidValue && !refusal.empty()) {
    throw Error(fmt::format("{}{} (arm {}): the launch failed with {}: the launcher refused {}", where, label.op,
                            label.arm, cudaGetErrorName(e), refusal));
  }
  if (kernel_fault_error(e)) {  // a kernel's fault, met by this launch: not this launch's refusal
    throw Error(
        fmt::format("{}{} (arm {}): the launch met {} ({}): a kernel faulted at or before this launch "
                    "(launches are asynchronous, so it may be an earlier kernel) and the CUDA context is lost; "
                    "`stepgraph generate --check-nodes` synchronises after every launch and names the kernel",
                    where, label.op, label.arm, cudaGetErrorName(e), cudaGetErrorString(e)));
  }
  throw Error(
      fmt::format("{}{} (arm {}): the launch failed with {} ({}); the op's launcher refused its shape, "
                  "pointers or launch configuration",
                  where, label.op, label.arm, cudaGetErrorName(e), cudaGetErrorString(e)));
}

bool kernel_fault_error(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable: return true;
    default: return false;
  }
}

namespace {
thread_local NodeChecks* t_checks = nullptr;

std::string node_name(const NodeLabel& label) {
  return fmt::format("{}{} (arm {})", label.layer >= 0 ? fmt::format("layer {} ", label.layer) : std::string(),
                     label.op, label.arm);
}
}  // namespace

NodeChecks* node_checks() { return t_checks; }

NodeCheckScope::NodeCheckScope(NodeChecks* checks) : previous_(t_checks) { t_checks = checks; }
NodeCheckScope::~NodeCheckScope() { t_checks = previous_; }

cudaError_t context_error() {
  (void)cudaGetLastError();  // clears a non-sticky error
  // A sticky error is not necessarily the runtime's last error any more (the call that returned it
  // may have reset that): every later call that uses the context returns it.
  const cudaError_t e = cudaDeviceSynchronize();
  (void)cudaGetLastError();
  return e;
}

bool sticky_error() { return context_error() != cudaSuccess; }

void node_fault(cudaError_t e, const NodeLabel& label) {
  throw KernelFault(fmt::format(
      "{}: the kernel failed while it ran: {} ({}){}", node_name(label), cudaGetErrorName(e), cudaGetErrorString(e),
      sticky_error() ? "; the CUDA context is lost, so this process cannot run further steps" : ""));
}

void checked_launch(NodeChecks& c, NodeRecorder* rec, cudaStream_t stream, const NodeLabel& label, int kernels) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check(cudaStreamIsCapturing(stream, &status));
  const bool capturing = status != cudaStreamCaptureStatusNone;
  int extra = 0;
  if (c.inject && !c.fault_op.empty() && label.layer == c.fault_layer && label.op == c.fault_op &&
      (capturing || c.sync_each)) {
    c.matched = true;
    check(c.inject(stream, c.fault_runs, c.fault_at));
    extra = 1;  // the drill's kernel is one more node of this launch, under its label
  }
  if (rec) rec->launched(stream, label, kernels < 0 ? kernels : kernels + extra);  // kAnyKernels, kAnyNodes stay
  if (!c.sync_each || capturing) return;
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) node_fault(e, label);
}

void DrillRuns::arm(NodeChecks& checks, int layer, const std::string& op, uint64_t at, Inject inject) {
  require(at >= 1, "fault drill: the run that faults is counted from 1, got {}", at);
  checks.fault_layer = layer;
  checks.fault_op = op;
  checks.fault_at = at;
  checks.inject = inject;
  checks.fault_runs = nullptr;
  if (op.empty()) return;
  if (!counter_.data()) {
    counter_ = DeviceBuffer(sizeof(unsigned long long));
    check(cudaMemset(counter_.data(), 0, sizeof(unsigned long long)));
    check(cudaDeviceSynchronize());  // zeroed before any step stream (non-blocking) runs the drill
  }
  checks.fault_runs = static_cast<unsigned long long*>(counter_.data());
}

uint64_t DrillRuns::runs() const {
  if (!counter_.data()) return 0;
  unsigned long long n = 0;
  check(cudaMemcpy(&n, counter_.data(), sizeof n, cudaMemcpyDeviceToHost));
  return n;
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

// A node's dependencies (in = true) or dependents. The edge data is fetched too: libraries such as
// cuBLAS add programmatic (PDL) edges, and asking for nodes alone is then cudaErrorLossyQuery.
std::vector<cudaGraphNode_t> neighbours(cudaGraphNode_t node, bool in) {
  size_t n = 0;
  std::vector<cudaGraphNode_t> out;
  std::vector<cudaGraphEdgeData> edges;
  for (int pass = 0; pass < 2; ++pass) {
    out.resize(n);
    edges.resize(n);
    cudaGraphNode_t* o = pass ? out.data() : nullptr;
    cudaGraphEdgeData* e = pass ? edges.data() : nullptr;
    if (in) {
      check(cudaGraphNodeGetDependencies(node, o, e, &n));
    } else {
      check(cudaGraphNodeGetDependentNodes(node, o, e, &n));
    }
    if (n == 0) break;
  }
  out.resize(n);
  return out;
}

}  // namespace

std::vector<cudaGraphNode_t> topo_kernel_nodes(cudaGraph_t graph) {
  size_t n = 0;
  check(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  check(cudaGraphGetNodes(graph, nodes.data(), &n));
  std::map<cudaGraphNode_t, size_t> indeg;
  for (auto node : nodes) indeg[node] = neighbours(node, true).size();
  std::queue<cudaGraphNode_t> ready;
  for (auto node : nodes) {
    if (indeg[node] == 0) ready.push(node);
  }
  std::vector<cudaGraphNode_t> order;
  while (!ready.empty()) {
    auto node = ready.front();
    ready.pop();
    order.push_back(node);
    for (auto o : neighbours(node, false)) {
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

namespace {

// A kernel node read through the driver API. The runtime's cudaGraphKernelNodeGetParams fails
// with cudaErrorInvalidDeviceFunction for kernels a library launched through the driver (cuBLAS),
// so the driver's own call is used for every node; its entry points are looked up through the
// runtime, which keeps libcuda out of the link (CI machines have no driver).
struct DriverKernelNode {
  const char* name = nullptr;
  Dim3 grid, block, cluster;
  unsigned smem = 0;
  int blocks_per_sm = 0;  // 0: the driver could not say
};

DriverKernelNode read_kernel_node(cudaGraphNode_t node) {
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  using FuncName = CUresult (*)(const char**, CUfunction);
  using KernName = CUresult (*)(const char**, CUkernel);
  using GetAttr = CUresult (*)(CUgraphNode, CUkernelNodeAttrID, CUkernelNodeAttrValue*);
  using KernFunc = CUresult (*)(CUfunction*, CUkernel);
  using Occupancy = CUresult (*)(int*, CUfunction, int, size_t);
  static const auto lookup = [](const char* sym, unsigned version) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    check(cudaGetDriverEntryPointByVersion(sym, &fn, version, cudaEnableDefault, &q));
    require(q == cudaDriverEntryPointSuccess && fn, "the CUDA driver has no '{}'", sym);
    return fn;
  };
  static const auto get_params = reinterpret_cast<GetParams>(lookup("cuGraphKernelNodeGetParams", 12000));
  static const auto func_name = reinterpret_cast<FuncName>(lookup("cuFuncGetName", 12030));
  static const auto kern_name = reinterpret_cast<KernName>(lookup("cuKernelGetName", 12030));
  static const auto get_attr = reinterpret_cast<GetAttr>(lookup("cuGraphKernelNodeGetAttribute", 11000));
  // The occupancy query is optional: without it a node's blocks_per_sm stays 0.
  static const auto optional = [](const char* sym, unsigned version) -> void* {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion(sym, &fn, version, cudaEnableDefault, &q) != cudaSuccess) {
      (void)cudaGetLastError();  // the query's own error (not sticky: nothing ran)
      return nullptr;
    }
    return q == cudaDriverEntryPointSuccess ? fn : nullptr;
  };
  static const auto kern_func = reinterpret_cast<KernFunc>(optional("cuKernelGetFunction", 12000));
  static const auto occupancy =
      reinterpret_cast<Occupancy>(optional("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050));
  CUDA_KERNEL_NODE_PARAMS p{};
  const CUresult r = get_params(reinterpret_cast<CUgraphNode>(node), &p);
  require(r == CUDA_SUCCESS, "cuGraphKernelNodeGetParams failed with CUresult {}", static_cast<int>(r));
  DriverKernelNode k;
  if (p.func) {
    if (func_name(&k.name, p.func) != CUDA_SUCCESS) k.name = nullptr;
  } else if (p.kern) {
    if (kern_name(&k.name, p.kern) != CUDA_SUCCESS) k.name = nullptr;
  }
  k.grid = Dim3{p.gridDimX, p.gridDimY, p.gridDimZ};
  k.block = Dim3{p.blockDimX, p.blockDimY, p.blockDimZ};
  k.smem = p.sharedMemBytes;
  // Resident blocks an SM can hold, for the node's waves (a library's kernel as well as ours).
  CUfunction f = p.func;
  if (!f && p.kern && !(kern_func && kern_func(&f, p.kern) == CUDA_SUCCESS)) f = nullptr;
  const int threads = static_cast<int>(p.blockDimX * p.blockDimY * p.blockDimZ);
  if (f && !(occupancy && occupancy(&k.blocks_per_sm, f, threads, p.sharedMemBytes) == CUDA_SUCCESS)) {
    k.blocks_per_sm = 0;
  }
  // Cluster dims: zeros (or a failed query) mean the node was launched without clusters.
  CUkernelNodeAttrValue v{};
  if (get_attr(reinterpret_cast<CUgraphNode>(node), CU_KERNEL_NODE_ATTRIBUTE_CLUSTER_DIMENSION, &v) == CUDA_SUCCESS &&
      v.clusterDim.x > 0 && v.clusterDim.y > 0 && v.clusterDim.z > 0) {
    k.cluster = Dim3{v.clusterDim.x, v.clusterDim.y, v.clusterDim.z};
  }
  return k;
}

}  // namespace

double grid_waves(const Dim3& grid, int blocks_per_sm, int sms) {
  if (blocks_per_sm <= 0 || sms <= 0) return 0.0;
  const double blocks = static_cast<double>(grid.x) * grid.y * grid.z;
  return blocks / (static_cast<double>(blocks_per_sm) * sms);
}

Manifest build_manifest(const std::string& graph_name, const std::string& arms, cudaGraph_t graph,
                        const NodeRecorder& recorder) {
  Manifest m;
  m.graph = graph_name;
  m.arms = arms;
  int index = 0, device = 0, sms = 0;
  check(cudaGetDevice(&device));
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const std::vector<cudaGraphNode_t> kernels = topo_kernel_nodes(graph);
  std::map<cudaGraphNode_t, int> kernel_index;
  for (size_t i = 0; i < kernels.size(); ++i) kernel_index[kernels[i]] = static_cast<int>(i);
  for (cudaGraphNode_t node : kernels) {
    const DriverKernelNode kp = read_kernel_node(node);
    ManifestNode mn;
    mn.index = index++;
    mn.kernel = demangle(kp.name);
    mn.grid = kp.grid;
    mn.block = kp.block;
    mn.cluster = kp.cluster;
    mn.smem_bytes = kp.smem;
    mn.blocks_per_sm = kp.blocks_per_sm;
    mn.waves = grid_waves(mn.grid, mn.blocks_per_sm, sms);
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
      for (auto d : neighbours(n, true)) {
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
                     {"blocks_per_sm", n.blocks_per_sm},
                     {"waves", n.waves},
                     {"bytes", n.label.bytes},
                     {"flops", n.label.flops}});
    if (!(n.cluster == Dim3{})) nodes.back()["cluster"] = {n.cluster.x, n.cluster.y, n.cluster.z};
  }
  nlohmann::json out = {{"graph", m.graph}, {"arms", m.arms}, {"nodes", nodes}, {"edges", m.edges}};
  if (!m.tuning.empty()) {
    nlohmann::json t = nlohmann::json::array();
    for (const ArmTiming& a : m.tuning)
      t.push_back({{"op", a.op}, {"arm", a.arm}, {"step_ms", a.ms}, {"kept", a.chosen}});
    out["tuning"] = t;
  }
  return out;
}

}  // namespace sg
