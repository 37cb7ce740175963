// marginal.h: the marginal cost of kernel nodes inside a captured graph: how much faster a replay
// gets when a group of nodes does no work. Each group's nodes are disabled in the executable graph
// (cudaGraphNodeSetEnabled: a disabled kernel node launches nothing but keeps its place in the
// dependency order), the graph is replayed and timed with events, and the nodes are enabled again.
// This is what removing (or infinitely speeding up) those nodes would buy, which a node's own
// duration does not say when nodes overlap, wait on their neighbours or pay launch and ramp costs.
// Timing only: while a group is disabled the graph's outputs are garbage (the buffers keep whatever
// the disabled nodes did not write); nothing is read back, and every address a node reads comes
// from the step's metadata, never from a disabled node's output, so replays stay in bounds.
#pragma once
#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "graphs/graph.h"
#include "graphs/manifest.h"

namespace sg {

struct MarginalCost {
  std::string group;       // the name group_of gave its nodes
  int nodes = 0;           // kernel nodes in the group
  double without_ms = 0;   // median replay time with the group disabled
  double marginal_ms = 0;  // baseline median minus without_ms
};

struct MarginalReport {
  double baseline_ms = 0;            // median replay time with every node enabled (before and after the groups)
  double spread_ms = 0;              // max - min of the baseline repetitions: differences below this are noise
  std::vector<MarginalCost> groups;  // largest marginal cost first
};

// Called with the CUDA error of a replay, of its timing events or of enabling or disabling a node
// (a kernel that faulted in an earlier replay surfaces there), and the group whose nodes were
// disabled then ("" with every node enabled), before the error is thrown as a plain Error. The
// graph's owner makes it the graph's fault report (ModelStep::check_replays with
// marginal_replay_note): a KernelFault, which the marginal costs pass on as it is.
using ReplayErrorFn = std::function<void(cudaError_t, const std::string& group)>;

// Groups the manifest's nodes by group_of (nodes it maps to "" are never disabled) and times each
// group; `reps` repetitions of `replays` replays each, medians per replay. The stream must not be
// capturing; the graph is left with every node enabled (also when an error is thrown, as far as
// the device still takes calls). `progress` (optional) is called after each group with groups
// done, groups in all and the group's name. `stop` (optional) is asked before each group: when it
// says true the remaining groups are left out (the report holds the groups timed so far, and the
// baseline is still timed at the end). `on_error` (optional): above.
MarginalReport marginal_costs(const CapturedGraph& graph, const Manifest& manifest, cudaStream_t stream,
                              const std::function<std::string(const ManifestNode&)>& group_of, int reps, int replays,
                              const std::function<void(int, int, const std::string&)>& progress = {},
                              const std::function<bool()>& stop = {}, const ReplayErrorFn& on_error = {});

// What the replays of the marginal costs did, for a fault's report (step_fault.h's `during`):
// "replayed for its marginal costs, every node enabled" or "..., with the nodes of group 'postconv'
// disabled".
std::string marginal_replay_note(const std::string& group);

// Per-replay times (ms) of `reps` repetitions of `replays` replays each (CUDA events), after two
// warm-up replays. A CUDA error goes to `on_error` (optional, with group "") before it is thrown.
std::vector<double> time_replays(const CapturedGraph& g, cudaStream_t s, int reps, int replays,
                                 const ReplayErrorFn& on_error = {});

// A fixed-width table of a report: group, nodes, ms without, marginal ms and its share of the
// baseline; given `node_us` (a group's summed CUPTI node time a step, us, such as bench's op-family
// table), also each group's node time and its overlap: node time less marginal cost, the part of
// its nodes' time that other nodes run beside (negative where disabling the group saves more than
// its own nodes' time: it delayed others); "-" for a group the map lacks.
std::string format_marginal_table(const MarginalReport& r, const std::map<std::string, double>& node_us = {});

}  // namespace sg
