// capture_report.h: what `stepgraph capture` prints per captured graph (its key, kernel and other
// nodes, capture and instantiation times, the device memory instantiation took; graphs/graph.h
// CaptureStats) and in total, as text and as JSON. Pure host code.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "graphs/graph.h"

namespace sg::cli {

struct CaptureRow {
  std::string key;   // "decode 32", "prefill 2048" (graphs/step_graphs.h describe())
  std::string name;  // the graph's name ("model-decode qwen3.5-4b b=32")
  CaptureStats stats;
};

// Summed over the rows (instantiate_bytes may be negative when memory was freed meanwhile).
CaptureStats capture_totals(const std::vector<CaptureRow>& rows);

// format_bytes with a sign: "-2.10 MB" for -2100000.
std::string format_signed_bytes(int64_t bytes);

// One line per graph, then the totals: key, kernel nodes, other nodes, capture ms, instantiate
// ms, instantiation memory (engine/tensor.h format_bytes: "2.10 MB").
std::string format_capture_table(const std::vector<CaptureRow>& rows);

// {"graphs": [{"key", "name", "kernel_nodes", "other_nodes", "capture_ms", "instantiate_ms",
// "instantiate_bytes"}, ...], "totals": {"graphs", the same fields but key and name}}.
nlohmann::json capture_json(const std::vector<CaptureRow>& rows);

}  // namespace sg::cli
