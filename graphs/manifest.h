// manifest.h: what is inside each captured graph. While a step is captured, the step code calls
// NodeRecorder::launched() after every kernel launch with a label (layer, op, arm, bytes it must
// move); the recorder asks the capture which node was just added, so labels never depend on node
// order. After capture, build_manifest() reads each kernel node's function, grid, block and shared
// memory back from the graph itself: the manifest proves which kernels and grids actually run.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "engine/cuda_handles.h"
#include "graphs/arm_tuning.h"
#include "kernels/contracts.h"

namespace sg {

struct NodeLabel {
  int layer = -1;    // -1 when not inside a layer
  std::string op;    // "conv.update", "postconv", "delta_rule.decode", ...
  std::string arm;   // the arm that runs after fallbacks ("grid", "megablock", "-" when the op has none)
  double bytes = 0;  // bytes the kernel must move (each input read once, each output written once)
  double flops = 0;  // floating-point operations of a matrix product (2 M N K); 0 where bytes bound the op
};

class NodeRecorder {
 public:
  static constexpr int kAnyKernels = -1;  // a library call (cuBLAS) that may add several kernels
  static constexpr int kAnyNodes = -2;    // a library call that may add none (an NCCL collective over one rank)
  // Call right after each launch on `stream`; labels every node the capture gained since the last
  // call and checks that they hold `kernels` kernel nodes (an error otherwise: a launch in between
  // was not labelled). The label's bytes go to the first kernel node of the launch, 0 to the others
  // (a split-K GEMM's reduction), so bytes summed over nodes count each launch once. Counts an
  // eager launch when the stream is not capturing.
  void launched(cudaStream_t stream, NodeLabel label, int kernels = 1);
  // Eager launches seen (stream not capturing): counts only.
  int eager_launches() const { return eager_; }
  const std::map<cudaGraphNode_t, NodeLabel>& labels() const { return labels_; }
  void clear() {
    labels_.clear();
    seen_.clear();
    eager_ = 0;
  }

 private:
  std::map<cudaGraphNode_t, NodeLabel> labels_;
  std::set<cudaGraphNode_t> seen_;
  int eager_ = 0;
};

// A launch failed: an Error naming its node ("layer 3 postconv (arm token_tile): the launch failed
// with cudaErrorInvalidValue ..."), after clearing the runtime's last error so the process can go on;
// where `e` is a kernel's fault (kernel_fault_error) the Error says that a kernel faulted at or before
// the launch, not that the launcher refused it.
[[noreturn]] void launch_failed(cudaError_t e, const NodeLabel& label);

// Checks a step can ask for around each of its launches (ModelStepOptions::check_nodes and
// fault_op): a NodeCheckScope makes them this thread's for the step's launches; outside a scope
// launched() checks nothing more.
struct NodeChecks {
  // Eager launches: synchronise the stream after each node, so a kernel that faults while it runs
  // (an illegal address) is an Error naming its node rather than a failure at a later sync.
  bool sync_each = false;
  // A fault drill: right after the node (fault_layer, fault_op), `inject` launches a kernel that
  // faults. In captured graphs that hold the node, and in eager launches only with sync_each (so
  // a capture's eager warm-up does not fault before any graph exists). Off while fault_op is empty.
  // With fault_runs (a device counter, zeroed) the drill's kernel counts the node's runs there and
  // faults from run fault_at (from 1) on, the runs before it doing nothing; without it, on every run.
  int fault_layer = -1;
  std::string fault_op;
  cudaError_t (*inject)(cudaStream_t, unsigned long long* runs, uint64_t at) = nullptr;
  unsigned long long* fault_runs = nullptr;
  uint64_t fault_at = 1;
  bool matched = false;  // set once the drill's kernel was launched (captured or eager)
};

// A fault drill's device side: the counter of its node's runs (NodeChecks::fault_runs), owned by
// the step runner that holds the NodeChecks.
class DrillRuns {
 public:
  using Inject = cudaError_t (*)(cudaStream_t, unsigned long long*, uint64_t);
  // Sets `checks`' drill: after node `layer`:`op` (empty: no drill, and nothing is allocated)
  // `inject` launches a kernel that counts every run in a zeroed device counter and faults from the
  // node's run `at` (from 1) on.
  void arm(NodeChecks& checks, int layer, const std::string& op, uint64_t at, Inject inject);
  // How many times the drill's kernel has run so far (0 without a drill). Call it once the owner
  // has synchronised the stream its steps run on (so that a fault is reported as the step's); a
  // CUDA error (a lost context) throws.
  uint64_t runs() const;

 private:
  DeviceBuffer counter_;
};

// The NodeChecks of this thread's current scope, or null.
NodeChecks* node_checks();

// Makes `checks` (null: none) this thread's for its lifetime and restores the previous ones.
class NodeCheckScope {
 public:
  explicit NodeCheckScope(NodeChecks* checks);
  ~NodeCheckScope();
  NodeCheckScope(const NodeCheckScope&) = delete;
  NodeCheckScope& operator=(const NodeCheckScope&) = delete;

 private:
  NodeChecks* previous_;
};

// The sticky error of a lost CUDA context (every call that uses the context returns it), else
// cudaSuccess; clears a non-sticky last error. Synchronises the device: for error paths only.
cudaError_t context_error();
// Whether the CUDA context is lost (context_error() != cudaSuccess).
bool sticky_error();
// Whether `e` is one a kernel raises while it runs (an illegal address, a trap, an assertion, a
// timeout...), which loses the context: a launch that returns it met an earlier fault.
bool kernel_fault_error(cudaError_t e);

// A kernel faulted while it ran: a KernelFault naming its node ("layer 3 attention.decode (arm mma):
// the kernel failed while it ran: cudaErrorIllegalAddress ...; the CUDA context is lost" when it is).
[[noreturn]] void node_fault(cudaError_t e, const NodeLabel& label);

// launched() under NodeChecks: the fault drill, the recorder, then the synchronised check.
void checked_launch(NodeChecks& checks, NodeRecorder* rec, cudaStream_t stream, const NodeLabel& label, int kernels);

// One call after each launch of a step: a failed launch is an Error naming the node (layer, op,
// arm), and under capture (rec not null) the launch's nodes are labelled. `label` (returning a
// NodeLabel) is called only then (or under NodeChecks), so plain eager steps build no label.
template <class LabelFn>
void launched(cudaError_t e, NodeRecorder* rec, cudaStream_t stream, const LabelFn& label, int kernels = 1) {
  if (e != cudaSuccess) launch_failed(e, label());
  if (NodeChecks* c = node_checks()) return checked_launch(*c, rec, stream, label(), kernels);
  if (rec) rec->launched(stream, label(), kernels);
}

struct ManifestNode {
  int index = 0;          // position among the graph's kernel nodes, in topological order
  uint64_t cupti_id = 0;  // CUPTI's id of the captured node (0 when CUPTI could not say)
  NodeLabel label;        // op "?" when a kernel node had no label (a launch the step forgot to label)
  std::string kernel;     // demangled kernel name
  Dim3 grid, block;
  Dim3 cluster;  // thread block cluster dims ({1, 1, 1} for a node launched without clusters)
  unsigned smem_bytes = 0;
  // Blocks of this kernel one SM can hold at its block size and dynamic shared memory (the
  // occupancy API at capture; for a cluster launch the bound without the cluster's placement), and
  // the grid's waves over the device: blocks / (blocks_per_sm x SMs), so 0.61 = one partial wave
  // on 61% of the SMs' block slots. 0 when the driver could not say.
  int blocks_per_sm = 0;
  double waves = 0;
};

// grid.x * grid.y * grid.z / (blocks_per_sm * sms); 0 when either count is not positive.
double grid_waves(const Dim3& grid, int blocks_per_sm, int sms);

struct Manifest {
  std::string graph;  // the graph's name ("decode b=32")
  std::string arms;   // ArmSelection::describe() at capture
  // With `--arms tune`: every arm timed for this graph's key, the kept ones marked (arm_tuning.h).
  std::vector<ArmTiming> tuning;
  std::vector<ManifestNode> nodes;
  // Dependencies between kernel nodes (indices into nodes), through any non-kernel nodes between
  // them: {from, to} means `to` waits for `from`.
  std::vector<std::pair<int, int>> edges;
  int unlabelled() const;
};

// The kernel nodes of `graph` in the manifest's order (ManifestNode::index): a topological order
// (Kahn's algorithm, ties by the graph's node order).
std::vector<cudaGraphNode_t> topo_kernel_nodes(cudaGraph_t graph);

Manifest build_manifest(const std::string& graph_name, const std::string& arms, cudaGraph_t graph,
                        const NodeRecorder& recorder);
std::string demangle(const char* name);
nlohmann::json to_json(const Manifest& m);

}  // namespace sg
