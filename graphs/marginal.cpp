// marginal.cpp: see marginal.h.
#include "graphs/marginal.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <source_location>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "graphs/node_timer.h"

namespace sg {
namespace {

// A CUDA error of the marginal costs' calls: first to `on_error` (which may throw the graph's own
// report), then thrown as a plain Error.
void check_replay(cudaError_t e, const ReplayErrorFn& on_error, const std::string& group,
                  const std::source_location loc = std::source_location::current()) {
  if (e == cudaSuccess) return;
  if (on_error) on_error(e, group);
  check(e, loc);
}

void set_enabled(cudaGraphExec_t exec, const std::vector<cudaGraphNode_t>& nodes, bool on,
                 const ReplayErrorFn& on_error, const std::string& group) {
  for (cudaGraphNode_t n : nodes) check_replay(cudaGraphNodeSetEnabled(exec, n, on ? 1u : 0u), on_error, group);
}

// On an error path: every node enabled again as far as the device takes it; errors are dropped,
// so the error under way (a KernelFault naming the graph) is the one reported.
void restore_enabled(cudaGraphExec_t exec, const std::vector<cudaGraphNode_t>& nodes) noexcept {
  for (cudaGraphNode_t n : nodes) (void)cudaGraphNodeSetEnabled(exec, n, 1u);
  (void)cudaGetLastError();
}

std::vector<double> timed_replays(const CapturedGraph& g, cudaStream_t s, int reps, int replays,
                                  const ReplayErrorFn& on_error, const std::string& group) {
  require(static_cast<bool>(g), "graph '{}' was never captured", g.name());
  for (int i = 0; i < 2; ++i) check_replay(cudaGraphLaunch(g.exec(), s), on_error, group);
  Event start, stop;
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    check_replay(cudaEventRecord(start.get(), s), on_error, group);
    for (int i = 0; i < replays; ++i) check_replay(cudaGraphLaunch(g.exec(), s), on_error, group);
    check_replay(cudaEventRecord(stop.get(), s), on_error, group);
    check_replay(cudaEventSynchronize(stop.get()), on_error, group);
    ms.push_back(Event::elapsed_ms(start, stop) / replays);
  }
  return ms;
}

}  // namespace

std::vector<double> time_replays(const CapturedGraph& g, cudaStream_t s, int reps, int replays,
                                 const ReplayErrorFn& on_error) {
  return timed_replays(g, s, reps, replays, on_error, std::string());
}

std::string marginal_replay_note(const std::string& group) {
  return group.empty() ? std::string("replayed for its marginal costs, every node enabled")
                       : fmt::format("replayed for its marginal costs, with the nodes of group '{}' disabled", group);
}

MarginalReport marginal_costs(const CapturedGraph& graph, const Manifest& manifest, cudaStream_t stream,
                              const std::function<std::string(const ManifestNode&)>& group_of, int reps, int replays,
                              const std::function<void(int, int, const std::string&)>& progress,
                              const std::function<bool()>& stop, const ReplayErrorFn& on_error) {
  require(static_cast<bool>(graph), "marginal costs: graph '{}' was never captured", manifest.graph);
  require(reps >= 1 && replays >= 1, "marginal costs: need reps >= 1 and replays >= 1 (got {}, {})", reps, replays);
  const std::vector<cudaGraphNode_t> kernels = topo_kernel_nodes(graph.graph());
  require(kernels.size() == manifest.nodes.size(), "marginal costs: graph '{}' has {} kernel nodes, its manifest {}",
          manifest.graph, kernels.size(), manifest.nodes.size());
  std::map<std::string, std::vector<cudaGraphNode_t>> groups;
  for (const ManifestNode& n : manifest.nodes) {
    const std::string g = group_of(n);
    if (!g.empty()) groups[g].push_back(kernels[static_cast<size_t>(n.index)]);
  }
  MarginalReport r;
  std::vector<double> base = timed_replays(graph, stream, reps, replays, on_error, std::string());
  for (const auto& [name, nodes] : groups) {
    if (stop && stop()) break;
    std::vector<double> ms;
    try {
      set_enabled(graph.exec(), nodes, false, on_error, name);
      ms = timed_replays(graph, stream, reps, replays, on_error, name);
    } catch (...) {
      restore_enabled(graph.exec(), nodes);
      throw;
    }
    set_enabled(graph.exec(), nodes, true, on_error, name);
    r.groups.push_back({name, static_cast<int>(nodes.size()), median_of(ms), 0.0});
    if (progress) progress(static_cast<int>(r.groups.size()), static_cast<int>(groups.size()), name);
  }
  const std::vector<double> after = timed_replays(graph, stream, reps, replays, on_error, std::string());
  base.insert(base.end(), after.begin(), after.end());
  r.baseline_ms = median_of(base);
  r.spread_ms = *std::max_element(base.begin(), base.end()) - *std::min_element(base.begin(), base.end());
  for (auto& g : r.groups) g.marginal_ms = r.baseline_ms - g.without_ms;
  std::sort(r.groups.begin(), r.groups.end(),
            [](const auto& a, const auto& b) { return a.marginal_ms > b.marginal_ms; });
  return r;
}

std::string format_marginal_table(const MarginalReport& r, const std::map<std::string, double>& node_us) {
  const bool nodes = !node_us.empty();
  std::string out = fmt::format(
      "  step {:.3f} ms with every node (spread {:.3f} ms); marginal cost = step minus step "
      "with the group's nodes disabled{}:\n",
      r.baseline_ms, r.spread_ms,
      nodes ? "; overlap = the group's node time less its marginal cost (what runs beside other nodes)" : "");
  out += fmt::format("  {:<24} {:>6} {:>12} {:>12} {:>7}", "group", "nodes", "without ms", "marginal ms", "share");
  out += nodes ? fmt::format(" {:>9} {:>11}\n", "node ms", "overlap ms") : "\n";
  for (const auto& g : r.groups) {
    out += fmt::format("  {:<24} {:>6} {:>12.3f} {:>12.3f} {:>6.1f}%", g.group, g.nodes, g.without_ms, g.marginal_ms,
                       r.baseline_ms > 0 ? 100 * g.marginal_ms / r.baseline_ms : 0.0);
    if (!nodes) {
      out += "\n";
    } else if (const auto it = node_us.find(g.group); it != node_us.end()) {
      out += fmt::format(" {:>9.3f} {:>11.3f}\n", it->second / 1000, it->second / 1000 - g.marginal_ms);
    } else {
      out += fmt::format(" {:>9} {:>11}\n", "-", "-");
    }
  }
  return out;
}

}  // namespace sg
