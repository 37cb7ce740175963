// clock_report.cpp: clock summaries as JSON, and the cautions between rows (clock_report.h).
#include "tools/cli/clock_report.h"

#include <nlohmann/json.hpp>

namespace sg::cli {

nlohmann::json clocks_json(const ClockSummary& c) {
  nlohmann::json held = nlohmann::json::object();
  for (const auto& [bit, n] : c.reasons) held[clock_reason_name(bit)] = n;
  return {{"samples", c.samples},
          {"sm_mhz", {{"median", c.sm_median}, {"min", c.sm_min}, {"max", c.sm_max}}},
          {"mem_mhz", c.mem_median},
          {"power_w", c.power_w_median},
          {"held_down", held}};
}

nlohmann::json clocks_json(const std::optional<ClockSummary>& c) {
  return c ? clocks_json(*c) : nlohmann::json(nullptr);
}

std::vector<std::string> clock_cautions(const std::vector<NamedClocks>& rows) {
  std::vector<std::string> out;
  for (size_t i = 1; i < rows.size(); ++i) {
    const std::string d = compare_clocks(rows[0].clocks, rows[i].clocks, rows[0].name, rows[i].name);
    if (!d.empty()) out.push_back(rows[i].name + ": " + d);
  }
  return out;
}

}  // namespace sg::cli
