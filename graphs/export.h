// export.h: views of a graph's nodes outside the terminal: CSV of per-node statistics, a Chrome /
// Perfetto trace of the replays CUPTI recorded (open in chrome://tracing or ui.perfetto.dev), and a
// Graphviz DOT drawing of the graph's kernel nodes with their labels and dependencies.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "graphs/manifest.h"
#include "graphs/node_timer.h"

namespace sg {

// One row per node: index, layer, op, arm, kernel, grid, block, smem, calls, mean/median/min/max
// us, share, bytes, GB/s. Fields with commas or quotes are quoted.
std::string to_csv(const std::vector<NodeStats>& stats);
// traceEvents of complete ("X") events, one per record matched to a node of `m` (time relative to
// the first record, microseconds), named by kernel, with layer, op, arm and node in args.
nlohmann::json to_chrome_trace(const Manifest& m, const std::vector<KernelRecord>& records);
// digraph: one box per kernel node ("L3 postconv [token_tile]", kernel, grid x block), edges from
// Manifest::edges.
std::string to_dot(const Manifest& m);
// "out/trace.json" + 32 -> "out/trace-b32.json" (the key inserted before the extension).
std::string with_key(const std::string& path, int key);

}  // namespace sg
