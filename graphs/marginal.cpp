// marginal.cpp: see marginal.h.
#include "graphs/marginal.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "engine/cuda_handles.h"
#include "engine/error.h"
#include "graphs/node_timer.h"

namespace sg {
namespace {

void set_enabled(cudaGraphExec_t exec, const std::vector<cudaGraphNode_t>& nodes, bool on) {
  for (cudaGraphNode_t n : nodes) check(cudaGraphNodeSetEnabled(exec, n, on ? 1u : 0u));
}

}  // namespace

std::vector<double> time_replays(const CapturedGraph& g, cudaStream_t s, int reps, int replays) {
  for (int i = 0; i < 2; ++i) g.replay(s);
  Event start, stop;
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    start.record(s);
    for (int i = 0; i < replays; ++i) g.replay(s);
    stop.record(s);
    stop.sync();
    ms.push_back(Event::elapsed_ms(start, stop) / replays);
  }
  return ms;
}

MarginalReport marginal_costs(const CapturedGraph& graph, const Manifest& manifest, cudaStream_t stream,
                              const std::function<std::string(const ManifestNode&)>& group_of, int reps, int replays,
                              const std::function<void(int, int, const std::string&)>& progress,
                              const std::function<bool()>& stop) {
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
  std::vector<double> base = time_replays(graph, stream, reps, replays);
  for (const auto& [name, nodes] : groups) {
    if (stop && stop()) break;
    set_enabled(graph.exec(), nodes, false);
    std::vector<double> ms;
    try {
      ms = time_replays(graph, stream, reps, replays);
    } catch (...) {
      set_enabled(graph.exec(), nodes, true);
      throw;
    }
    set_enabled(graph.exec(), nodes, true);
    r.groups.push_back({name, static_cast<int>(nodes.size()), median_of(ms), 0.0});
    if (progress) progress(static_cast<int>(r.groups.size()), static_cast<int>(groups.size()), name);
  }
  const std::vector<double> after = time_replays(graph, stream, reps, replays);
  base.insert(base.end(), after.begin(), after.end());
  r.baseline_ms = median_of(base);
  r.spread_ms = *std::max_element(base.begin(), base.end()) - *std::min_element(base.begin(), base.end());
  for (auto& g : r.groups) g.marginal_ms = r.baseline_ms - g.without_ms;
  std::sort(r.groups.begin(), r.groups.end(),
            [](const auto& a, const auto& b) { return a.marginal_ms > b.marginal_ms; });
  return r;
}

std::string format_marginal_table(const MarginalReport& r) {
  std::string out = fmt::format(
      "  step {:.3f} ms with every node (spread {:.3f} ms); marginal cost = step minus step "
      "with the group's nodes disabled:\n",
      r.baseline_ms, r.spread_ms);
  out += fmt::format("  {:<24} {:>6} {:>12} {:>12} {:>7}\n", "group", "nodes", "without ms", "marginal ms", "share");
  for (const auto& g : r.groups) {
    out += fmt::format("  {:<24} {:>6} {:>12.3f} {:>12.3f} {:>6.1f}%\n", g.group, g.nodes, g.without_ms, g.marginal_ms,
                       r.baseline_ms > 0 ? 100 * g.marginal_ms / r.baseline_ms : 0.0);
  }
  return out;
}

}  // namespace sg
