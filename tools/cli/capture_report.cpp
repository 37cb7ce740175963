// capture_report.cpp: the per-graph table and JSON of `stepgraph capture` (see capture_report.h).
#include "tools/cli/capture_report.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "engine/tensor.h"

namespace sg::cli {
namespace {

std::string line(const std::string& key, const CaptureStats& s) {
  return fmt::format("{:<16} {:>8} {:>7} {:>12.2f} {:>15.2f} {:>15}\n", key, s.kernel_nodes, s.other_nodes,
                     s.capture_ms, s.instantiate_ms, format_signed_bytes(s.instantiate_bytes));
}

nlohmann::json stats_json(const CaptureStats& s) {
  return {{"kernel_nodes", s.kernel_nodes},
          {"other_nodes", s.other_nodes},
          {"capture_ms", s.capture_ms},
          {"instantiate_ms", s.instantiate_ms},
          {"instantiate_bytes", s.instantiate_bytes}};
}

}  // namespace

std::string format_signed_bytes(int64_t b) {
  // fmt rather than "-" + string: GCC 12 warns about that concatenation (-Wrestrict, a false positive).
  return b < 0 ? fmt::format("-{}", format_bytes(static_cast<double>(-b))) : format_bytes(static_cast<double>(b));
}

CaptureStats capture_totals(const std::vector<CaptureRow>& rows) {
  CaptureStats t;
  for (const auto& r : rows) {
    t.kernel_nodes += r.stats.kernel_nodes;
    t.other_nodes += r.stats.other_nodes;
    t.capture_ms += r.stats.capture_ms;
    t.instantiate_ms += r.stats.instantiate_ms;
    t.instantiate_bytes += r.stats.instantiate_bytes;
  }
  return t;
}

std::string format_capture_table(const std::vector<CaptureRow>& rows) {
  std::string out = fmt::format("{:<16} {:>8} {:>7} {:>12} {:>15} {:>15}\n", "graph key", "kernels", "others",
                                "capture ms", "instantiate ms", "instantiate mem");
  for (const auto& r : rows) out += line(r.key, r.stats);
  out += line(fmt::format("total ({} graphs)", rows.size()), capture_totals(rows));
  return out;
}

nlohmann::json capture_json(const std::vector<CaptureRow>& rows) {
  nlohmann::json graphs = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json g = stats_json(r.stats);
    g["key"] = r.key;
    g["name"] = r.name;
    graphs.push_back(std::move(g));
  }
  nlohmann::json totals = stats_json(capture_totals(rows));
  totals["graphs"] = rows.size();
  return {{"graphs", graphs}, {"totals", totals}};
}

}  // namespace sg::cli
