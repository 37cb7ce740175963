// export.cpp: CSV, Chrome trace and DOT views of manifests and node statistics.
#include "graphs/export.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

namespace sg {
namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string dim(const Dim3& d) { return fmt::format("{}x{}x{}", d.x, d.y, d.z); }

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string to_csv(const std::vector<NodeStats>& stats) {
  std::string out =
      "node,layer,op,arm,kernel,grid,block,smem_bytes,calls,mean_us,median_us,min_us,max_us,span_median_us,share,bytes,"
      "gbps,blocks_per_sm,waves\n";
  for (const auto& s : stats) {
    out += fmt::format("{},{},{},{},{},{},{},{},{},{:.3f},{:.3f},{:.3f},{:.3f},{:.3f},{:.4f},{:.0f},{:.1f},{},{:.3f}\n",
                       s.node.index, s.node.label.layer, csv_field(s.node.label.op), csv_field(s.node.label.arm),
                       csv_field(s.node.kernel), dim(s.node.grid), dim(s.node.block), s.node.smem_bytes, s.calls,
                       s.mean_us, s.median_us, s.min_us, s.max_us, s.span_median_us, s.share, s.node.label.bytes,
                       s.gbps, s.node.blocks_per_sm, s.node.waves);
  }
  return out;
}

nlohmann::json to_chrome_trace(const Manifest& m, const std::vector<KernelRecord>& records) {
  std::map<uint64_t, const ManifestNode*> by_id;
  for (const auto& n : m.nodes) by_id[n.cupti_id] = &n;
  std::vector<const KernelRecord*> matched;
  for (const auto& r : records) {
    if (r.node_id != 0 && by_id.count(r.node_id)) matched.push_back(&r);
  }
  std::sort(matched.begin(), matched.end(), [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
  nlohmann::json events = nlohmann::json::array();
  const uint64_t t0 = matched.empty() ? 0 : matched.front()->start_ns;
  for (const auto* r : matched) {
    const ManifestNode& n = *by_id.at(r->node_id);
    events.push_back({{"name", short_kernel_name(n.kernel)},
                      {"cat", n.label.op},
                      {"ph", "X"},
                      {"ts", (r->start_ns - t0) / 1000.0},
                      {"dur", (r->end_ns - r->start_ns) / 1000.0},
                      {"pid", 1},
                      {"tid", 1},
                      {"args",
                       {{"node", n.index},
                        {"layer", n.label.layer},
                        {"op", n.label.op},
                        {"arm", n.label.arm},
                        {"grid", dim(n.grid)},
                        {"block", dim(n.block)}}}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ns"}, {"otherData", {{"graph", m.graph}, {"arms", m.arms}}}};
}

std::string to_dot(const Manifest& m) {
  std::string out =
      fmt::format("digraph \"{}\" {{\n  label=\"{}\\n{}\";\n  node [shape=box, fontname=\"monospace\"];\n",
                  dot_escape(m.graph), dot_escape(m.graph), dot_escape(m.arms));
  for (const auto& n : m.nodes) {
    const std::string head = n.label.layer >= 0 ? fmt::format("L{} {}", n.label.layer, n.label.op) : n.label.op;
    out += fmt::format("  n{} [label=\"{} [{}]\\n{}\\n{} x {}\"];\n", n.index, dot_escape(head),
                       dot_escape(n.label.arm), dot_escape(short_kernel_name(n.kernel)), dim(n.grid), dim(n.block));
  }
  for (const auto& [from, to] : m.edges) out += fmt::format("  n{} -> n{};\n", from, to);
  return out + "}\n";
}

std::string with_key(const std::string& path, int key) {
  const auto slash = path.find_last_of('/');
  const auto dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return fmt::format("{}-b{}", path, key);
  return fmt::format("{}-b{}{}", path.substr(0, dot), key, path.substr(dot));
}

}  // namespace sg
